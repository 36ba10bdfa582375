"""The Model Context Protocol face of the service (the official `mcp` SDK): the same
services as the REST API, as tools. `tools.py` is the tool table (inputs from the REST
request models), `server.py` runs a call, `http.py` serves it at /mcp behind the REST API's
auth, and `htm mcp` (app/cli.py) over stdio."""
