"""The `mem` command: thin typer commands over eventstore, projections and sync."""
