"""A stand-in for the `nvtx` package as it behaves with an NVTX tool (ncu) attached: domains hand
out real attributes, and every push appends the domain's open stack to $FAKE_NVTX_LOG as one JSON
line (`["smlens:cold_prefill", "smlens:layer_0", ...]`), the form ncu's push/pop column gives."""
import json
import os

_DOMAINS = {}


class _Domain:
    def __init__(self, name):
        self.name = name
        self.stack = []

    def get_event_attributes(self, message=None, **_):
        return message

    def push_range(self, attributes):
        self.stack.append(f"{self.name}:{attributes}")
        path = os.environ.get("FAKE_NVTX_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as log:
                log.write(json.dumps(self.stack) + "\n")

    def pop_range(self):
        self.stack.pop()


def get_domain(name=None):
    return _DOMAINS.setdefault(name, _Domain(name))
