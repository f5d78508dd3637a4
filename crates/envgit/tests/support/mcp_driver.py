# The MCP client the tests drive `envgit mcp` with (run by tests/mcp.rs: `python3 driver.py spec.json`).
import asyncio, json, os, subprocess, sys
import mcp_types
from mcp import Client, StdioServerParameters

async def main():
    spec = json.load(open(sys.argv[1]))
    params = StdioServerParameters(
        command=spec["envgit"],
        args=["mcp", "--project", spec["project"]],
        env=spec["env"],
        cwd="/",
    )
    out = {"tools": [], "results": [], "elicitations": []}
    answer = spec.get("answer")

    async def on_elicit(context, params):
        out["elicitations"].append({
            "message": params.message,
            "schema": params.requested_schema if isinstance(params.requested_schema, dict)
            else params.requested_schema.model_dump(by_alias=True, exclude_none=True),
        })
        return mcp_types.ElicitResult(action="accept", content={"decision": answer})

    kwargs = {"mode": spec.get("mode", "auto")}
    if answer is not None:
        kwargs["elicitation_callback"] = on_elicit
    async with Client(params, **kwargs) as c:
        out["protocol"] = c.protocol_version
        tools = await c.list_tools()
        out["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in tools.tools
        ]
        for call in spec["calls"]:
            if "__rewind_to" in call:
                # Another terminal: `envgit rewind N` while the server keeps running.
                step = out["results"][call["__rewind_to"]]["meta"]["envgit/step"]
                subprocess.run(
                    [spec["envgit"], "rewind", str(step)],
                    cwd=spec["project"],
                    env=spec["env"],
                    check=True,
                    capture_output=True,
                )
                out["results"].append({"rewound": step})
                continue
            if "__hard_link" in call:
                # The person's pnpm between two calls: a file of its store linked into the
                # project.
                src, dst = call["__hard_link"]
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.link(src, dst)
                out["results"].append({"linked": dst})
                continue
            if "__write" in call:
                # The person's editor between two calls.
                path, text = call["__write"]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
                out["results"].append({"wrote": path})
                continue
            if "__listen_unix" in call:
                # A service of the person's, started on the host between two calls, listening
                # in the project.
                import socket, threading
                path = call["__listen_unix"]
                listener = socket.socket(socket.AF_UNIX)
                listener.bind(path)
                listener.listen(8)

                def answer():
                    while True:
                        conn, _ = listener.accept()
                        conn.sendall(b"the host's service")
                        conn.close()

                threading.Thread(target=answer, daemon=True).start()
                out["results"].append({"listening": path})
                continue
            if "__sleep" in call:
                # The client thinks: no call in flight for a while.
                await asyncio.sleep(call["__sleep"])
                out["results"].append({"slept": True})
                continue
            if "__cancel_after" in call:
                # The client gives up: the SDK sends notifications/cancelled.
                import anyio
                after = call.pop("__cancel_after")
                with anyio.move_on_after(after):
                    await c.call_tool("execute", call)
                out["results"].append({"cancelled": True})
                continue
            r = await c.call_tool("execute", call)
            text = "\n".join(b.text for b in r.content if getattr(b, "type", "") == "text")
            out["results"].append({"is_error": bool(r.is_error), "text": text, "meta": r.meta or {}})
    print(json.dumps(out))

asyncio.run(main())
