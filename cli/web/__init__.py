"""`mem ui`: memory over time in a browser, server-rendered from the same `Memory` the CLI uses."""
