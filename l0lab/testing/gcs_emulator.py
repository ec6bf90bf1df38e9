"""`python -m l0lab.testing.gcs_emulator start ...`: the pinned `gcp-storage-emulator`, with
the one change that lets gcd's GCS client talk to it as to GCS, and one for speed.

GCS answers each call of a JSON batch with ``Content-ID: <response-ID>`` (the id its
request part carried); the emulator writes no Content-ID at all, and gcd matches batch
answers to objects by that id only (`gcd.storage.gcs.wire`), never by position. This
launcher echoes the request's Content-ID in each answer part, as GCS does, and changes
nothing else: the emulator's other deviations (startOffset, maxResults and
ifGenerationMatch ignored) stay, and tests/gcd/storage/test_gcs_emulator.py pins them,
and the missing Content-ID, on the unchanged emulator (`LocalGcs(content_ids=False)`).

Speed: the emulator serialises its whole metadata (every object of every bucket) after
each write, for persistence; in memory (``--in-memory``) nothing reads it back after
start, so the launcher skips it: a write costs ~1 ms instead of ~30 us per stored object.
"""

from __future__ import annotations

import sys
from typing import Any

from gcp_storage_emulator.handlers import objects

_BATCH = objects.batch


def _batch(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
    """The emulator's batch handler; each part's Content-Type line is followed by the
    request part's Content-ID and the blank line that ends the part's headers."""
    ids = iter([item.get("content_id") for item in request.data])
    write = response.write

    def write_with_id(text: str) -> Any:
        marker = "Content-Type: application/http\r\n"
        if text.endswith(marker):
            content_id = next(ids, None)
            if content_id:
                text += f"Content-ID: <response-{content_id.strip().strip('<>')}>\r\n\r\n"
        return write(text)

    response.write = write_with_id
    try:
        return _BATCH(request, response, storage, *args, **kwargs)
    finally:
        response.write = write


objects.batch = _batch  # before the server module builds its handler table

from gcp_storage_emulator import server  # noqa: E402

_PARSE = server._parse_batch_item


def _parse_batch_item(item: Any) -> Any:
    params = _PARSE(item)
    params["content_id"] = item.get("Content-ID")
    return params


server._parse_batch_item = _parse_batch_item

if "--in-memory" in sys.argv:
    from gcp_storage_emulator.storage import Storage

    Storage._write_config_to_file = lambda self: None  # read back only at start

if __name__ == "__main__":
    from gcp_storage_emulator.__main__ import main

    main(sys.argv[1:])
