"""The edges of the publisher: the `watermark` command and its HTTP API.

Lives here: `front` (the listeners of `watermark serve`), `http_api` (the writer and
reconciler endpoints, with the replica redirects), `http_body` (a request body read
within limits and checked field by field), `http_server` (the HTTP/1.1 server and
its limits), `auth` (bearer tokens, roles, where the API may listen).

May import: every lower watermark layer (`errors`, `core`, `options`, `logs`, `etcd`,
`service`). Never gcd: `watermark namespace` is wired in `watermark.__main__`.
"""
