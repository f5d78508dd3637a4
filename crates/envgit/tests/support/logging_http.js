// An HTTP/1.1 upstream on loopback for the smuggling tests, with Node's own parser (llhttp):
// every request it reads is appended to the JSON-lines file named by argv[2] and answered 200.
// Prints its port, serves until killed.
const http = require("http");
const fs = require("fs");
const log = process.argv[2];
const server = http.createServer((req, res) => {
  const parts = [];
  req.on("data", (d) => parts.push(d));
  req.on("end", () => {
    const body = Buffer.concat(parts).toString("latin1");
    fs.appendFileSync(log, JSON.stringify({
      server: "node", method: req.method, target: req.url,
      host: req.headers.host === undefined ? null : req.headers.host, body,
    }) + "\n");
    res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": "3" });
    res.end("ok\n");
  });
});
server.on("clientError", (err, socket) => socket.destroy());
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
