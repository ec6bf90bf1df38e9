"""The writer clients of the publisher's HTTP API (`watermark serve`), sync and async.

Lives here: `protocol` (what both clients decide without I/O: the publisher set a token
may be sent to, which redirects may be followed, what to do after each answer, the
answers as values), `routes` (every route once, as an operation both clients drive:
request building, the batch loops, the answers' parsing), `sync` (`WriterClient`, on
urllib3: pooled keep-alive connections with timeouts, already installed with
boto3/botocore), `aio` (`AsyncWriterClient`, on aiohttp, which the service itself uses).

May import: every lower watermark layer, `watermark.api.openapi_errors` included (the
one table of error codes and what to do after each). Nothing imports the clients but
the package face (`watermark`) and the composition roots.
"""
