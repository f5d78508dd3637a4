# A remote MCP server over Streamable HTTP for tests/mcp.rs: `python3 mcp_remote_server.py PORT`.
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("remote")

@server.tool(structured_output=False)
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()

server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
