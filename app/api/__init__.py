"""The local HTTP API's ground: request input, the server loop, peer checks, schema, client."""
