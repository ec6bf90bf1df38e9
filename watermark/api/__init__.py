"""The publisher's HTTP API: its description, its app and routes, its server and listeners.

Lives here: `front` (the listeners of `watermark serve`), `http_api` (the aiohttp app:
routes registered from `openapi`, authorization and error middlewares), the routes by
concept (`http_fences`, `http_partitions`, `http_registry`), `http_routing` (replica
redirects), `http_errors` (the JSON error answers), `http_body` (a request body read
within limits and checked field by field), `http_server` (the HTTP/1.1 server and its
limits), `probes` (the probe listener), `openapi` (the API's one description),
`openapi_schemas` and `openapi_errors` (its schemas and error table), `owners`
(deregistration and revocation under the live-owner rule).

May import: the kernel (`l0gc`), `watermark.core` and `watermark.service`.
"""
