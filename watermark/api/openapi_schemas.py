"""The schemas of the publisher's HTTP API (`SCHEMAS`), for the OpenAPI document.

`watermark.api.openapi` assembles the document from these, the routes and the error
table; docs/openapi.json is its checked-in copy.
"""

from __future__ import annotations

from typing import Any, Final

from l0gc.contract.record import RECORD_VERSION
from l0gc.contract.references import MAX_ENTRY_KEYS, MAX_KEY_BYTES
from watermark.api.http_body import MAX_FENCE_TIMEOUT_S, MAX_FIELD_VALUE
from watermark.api.limits import DEFAULT_MAX_BATCH_ENTRIES
from watermark.api.openapi_errors import ERROR_CODES

__all__ = ["SCHEMAS", "STATE_FIELDS", "Json", "ref"]

Json = dict[str, Any]


def ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


_INT: Final[Json] = {"type": "integer", "minimum": 0, "maximum": MAX_FIELD_VALUE}
_BOUND: Final[Json] = {"type": ["integer", "null"]}
_BOUNDS: Final[Json] = {
    "type": "array",
    "items": _BOUND,
    "minItems": 2,
    "maxItems": 2,
    "description": "[lower, upper], both null when empty",
}


_OBJECTS: Final[Json] = {
    "type": "array",
    "maxItems": MAX_ENTRY_KEYS,
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_BYTES},
}

_LOG_REFERENCES: Final[Json] = {
    "type": ["object", "null"],
    "properties": {
        "offsets": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "keys": {"type": "array", "items": _OBJECTS["items"]},
    },
    "required": ["offsets", "keys"],
    "additionalProperties": False,
    "description": "with log_end_offset, from a writer that names objects: the keys the "
    "log's entries name, each with its entry's offset (non-decreasing), at least for the "
    "entries from the state's references_from through the log end; an owner that holds "
    "references refuses a log end past its applied log without them (docs/references.md)",
}


def _obj(props: Json, required: list[str] | None = None, **more: Any) -> Json:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
        **more,
    }


STATE_FIELDS: Final[Json] = {
    "partition": {"type": "string"},
    "owner": {"type": "string", "description": "this publisher's owner id"},
    "owner_epoch": {"type": "integer", "minimum": 0},
    "window": {**_BOUNDS, "description": "the fencing window [oldest accepted, latest seen]"},
    "watermark": {"type": "integer", "minimum": -1, "description": "M(p) as computed now"},
    "published_watermark": {
        "type": "integer",
        "minimum": -1,
        "description": "M(p) as last written to etcd",
    },
    "created_epoch": {
        "type": "integer",
        "minimum": 0,
        "description": "no object of this partition is stamped below it",
    },
    "applied_window": {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 2,
        "maxItems": 2,
        "description": "[previous, highest] applied epoch",
    },
    "last_applied_offset": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "the last log offset committed (resume after it)",
    },
    "reconciled_offset": {"type": ["integer", "null"], "minimum": 0},
    "log_end_known": {"type": "boolean", "description": "the state holds every entry of the log"},
    "log_end_wanted": {
        "type": "boolean",
        "description": "the reconciler should read the log's last offset "
        "after this answer and send it as log_end_offset with its next "
        "report (the owner does not know where the log ends)",
    },
    "references_from": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "while log_end_wanted: the first log offset the owner never "
        "applied; a writer that names objects sends, with the log end, "
        "log_references for the entries from here on (docs/references.md)",
    },
    "sealed": {"type": "boolean"},
    "frozen": {
        "type": ["string", "null"],
        "description": "why M(p) no longer moves (a fencing violation), else null",
    },
    "inflight_fences": {"type": "integer", "minimum": 0},
    "waiting_slides": {"type": "integer", "minimum": 0},
    "dirty": {"type": "boolean", "description": "changed since the last publish"},
    "references": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "object keys held referenced by unreleased entries; null while the "
        "writer never named any",
    },
}

_GRANTED_FIELDS: Final[Json] = {
    "token": {
        "type": "string",
        "minLength": 1,
        "description": "bearer credential of this one fence; commit or abort it",
    },
    "partition": {"type": "string"},
    "epoch": _INT,
    "window": {**_BOUNDS, "description": "the fencing window right after the grant"},
    "slid": {"type": "boolean", "description": "this fence slid the window"},
    "deadline": {
        "type": ["number", "null"],
        "description": "unix seconds of the hold deadline (null: none)",
    },
    "expires_in_s": {"type": ["number", "null"], "minimum": 0},
}

_ERROR_FIELDS: Final[Json] = {
    "error": {"type": "string", "enum": sorted(ERROR_CODES)},
    "message": {"type": "string", "description": "what was wrong and what to do"},
    "window": _BOUNDS,
    "floor": {"type": ["integer", "null"]},
    "cluster_epoch": {"type": "integer"},
    "held_epoch": {"type": "integer", "description": "fence_timeout: the oldest held fence"},
    "held_for_s": {"type": "number"},
    "committed_offset": {"type": "integer"},
    "owner": {"type": "string"},
    "address": {"type": "string"},
}

_BATCH_LIMIT = (
    f"at most {DEFAULT_MAX_BATCH_ENTRIES} entries by default (a server flag may change it): "
    "more is 413 batch_too_large"
)
SCHEMAS: Final[Json] = {
    # Open: new fields may appear in an error answer (docs/python-api.md); a client
    # reads `error` and `message` and ignores what it does not know.
    "Error": _obj(_ERROR_FIELDS, ["error", "message"], additionalProperties=True),
    "PartitionState": _obj(STATE_FIELDS),
    "CommitAnswer": _obj(
        {
            **STATE_FIELDS,
            "repeat": {
                "type": "boolean",
                "description": "true: this fence was already committed at this offset (a retry)",
            },
        }
    ),
    "FenceRequest": _obj(
        {
            "epoch": _INT,
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FENCE_TIMEOUT_S},
        },
        ["epoch"],
    ),
    "FenceGranted": _obj(_GRANTED_FIELDS),
    "OffsetRequest": _obj(
        {
            "offset": _INT,
            "objects": {
                **_OBJECTS,
                "description": "optional: the object keys this entry references; the "
                "publisher holds them until the reconciler releases the entry, and every "
                "sweeper refuses to delete them (docs/references.md)",
            },
        },
        ["offset"],
    ),
    "ReconciledRequest": _obj(
        {
            "offset": {
                "type": "integer",
                "minimum": -1,
                "maximum": MAX_FIELD_VALUE,
                "description": "every entry through it is lifted; -1: none yet (an "
                "empty log still reports, so that its owner can learn its end)",
            },
            "log_end_offset": {
                "type": ["integer", "null"],
                "minimum": -1,
                "maximum": MAX_FIELD_VALUE,
                "description": "only after an answer said log_end_wanted: the "
                "offset of the log's last entry, read after that answer",
            },
            "log_references": _LOG_REFERENCES,
            "objects": {
                **_OBJECTS,
                "description": "optional: the object keys this report lifted; given, "
                "only they are released among the entries passed, and an entry passed "
                "whose key is not named stays referenced (docs/references.md)",
            },
        },
        ["offset"],
    ),
    "AbortAnswer": _obj(
        {
            "aborted": {"type": "boolean", "description": "released now"},
            "outcome": {
                "type": "string",
                "enum": ["aborted", "committed", "refused", "reclaimed", "revoked"],
                "description": "how the fence ended",
            },
        }
    ),
    "AdoptRequest": _obj(
        {
            "log_end_offset": {
                "type": ["integer", "null"],
                "minimum": -1,
                "maximum": MAX_FIELD_VALUE,
            },
            "log_references": _LOG_REFERENCES,
        },
        [],
    ),
    "FenceBatchRequest": _obj(
        {
            "fences": {
                "type": "array",
                "minItems": 1,
                "description": _BATCH_LIMIT,
                "items": _obj({"partition": {"type": "string", "minLength": 1}, "epoch": _INT}),
            },
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_FENCE_TIMEOUT_S},
        },
        ["fences"],
    ),
    "FenceBatchAnswer": _obj(
        {
            "results": {
                "type": "array",
                "items": {
                    "oneOf": [
                        _obj({"status": {"const": 200}, **_GRANTED_FIELDS}),
                        _obj(
                            {
                                "partition": {"type": "string"},
                                "status": {"type": "integer"},
                                **_ERROR_FIELDS,
                            },
                            ["partition", "status", "error", "message"],
                        ),
                    ]
                },
            }
        }
    ),
    "CommitBatchRequest": _obj(
        {
            "commits": {
                "type": "array",
                "minItems": 1,
                "description": _BATCH_LIMIT,
                "items": _obj(
                    {
                        "token": {"type": "string", "minLength": 1},
                        "offset": _INT,
                        "objects": {
                            **_OBJECTS,
                            "description": "as on the single commit (instead of the "
                            "batch's objects)",
                        },
                    },
                    ["token", "offset"],
                ),
            },
            "objects": {
                **_OBJECTS,
                "description": "optional: object keys every entry of the batch that names "
                "none of its own references (one L0 object holding data of many "
                "partitions: its key is sent once); docs/references.md",
            },
        },
        ["commits"],
    ),
    "CommitBatchAnswer": _obj(
        {
            "results": {
                "type": "array",
                "items": {
                    "oneOf": [
                        _obj(
                            {
                                "status": {"const": 200},
                                "partition": {"type": "string"},
                                "offset": _INT,
                                "repeat": {"type": "boolean"},
                            }
                        ),
                        _obj(
                            {"status": {"type": "integer", "minimum": 300}, **_ERROR_FIELDS},
                            ["status", "error", "message"],
                        ),
                    ]
                },
            }
        }
    ),
    "Epoch": _obj(
        {
            "version": {"const": RECORD_VERSION},
            "epoch": {
                "type": "integer",
                "minimum": 0,
                "description": "the cluster epoch, read from etcd for this request",
            },
            "partitions": {
                "type": "array",
                "items": _obj(
                    {
                        "partition": {"type": "string"},
                        "created_epoch": {"type": "integer", "minimum": 0},
                        "window": _BOUNDS,
                    }
                ),
                "description": "the partitions hosted here: stamp max(epoch, created_epoch)",
            },
        }
    ),
    "Owner": _obj(
        {
            "version": {"const": RECORD_VERSION},
            "partition": {"type": "string"},
            "owner": {"type": "string"},
            "address": {"type": ["string", "null"]},
            "local": {"type": "boolean"},
        }
    ),
    "Listing": _obj(
        {
            "version": {"const": RECORD_VERSION},
            "owner": {"type": "string"},
            "partitions": {"type": "array", "items": ref("PartitionState")},
        }
    ),
    "RegisterAnswer": _obj(
        {
            "version": {"const": RECORD_VERSION},
            "partition": {"type": "string"},
            "registered": {
                "type": "boolean",
                "description": "created by this request (false: "
                "it was registered already, nothing changed)",
            },
            "hosted": {
                "type": "boolean",
                "description": "this publisher serves it now (false: "
                "another publisher owns it, or replicas will claim it)",
            },
            "record": {
                "type": "object",
                "description": "the partition record as stored in etcd (docs/etcd-contract.md)",
            },
        }
    ),
    "DeregisterRequest": _obj(
        {
            "force": {
                "type": "boolean",
                "description": "admin tokens only: revoke a live owner "
                "first (the request then takes a few seconds)",
            },
            "reason": {
                "type": "string",
                "maxLength": 1000,
                "description": "written to the audit log line of force",
            },
        },
        [],
    ),
    "DeregisterAnswer": _obj(
        {
            "version": {"const": RECORD_VERSION},
            "partition": {"type": "string"},
            "deregistered": {"type": "boolean", "description": "false: it was not registered"},
        }
    ),
    "Status": _obj({"status": {"type": "string", "enum": ["ok", "ready", "not_ready"]}}),
}
