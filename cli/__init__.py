"""The `mem` command: thin typer commands over eventstore, projections and sync."""

import sys


def main() -> None:
    """`mem` (cli.app's main). Importing the commands takes a few hundred ms, and a Ctrl-C in them was a
    KeyboardInterrupt traceback (nc21a); past them, cli.app.main says what an interruption left."""
    try:
        from .app import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted before the command began; nothing was recorded\n")
        sys.exit(130)
