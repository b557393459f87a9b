"""An item's argv as the runner renders them (specfleet/worker/runspec.py), for the tests that read a
spec's commands: the placeholders where model and version are not given."""
from specfleet.worker.runspec import Item, RunSpec


def rendered(spec: RunSpec | dict, item: Item | dict, *, model: str | None = None,
             vllm_version: str | None = None) -> tuple[list[str], list[list[str]]]:
    """An item's `vllm serve` argv and its bench runs' argv on the spec's host and port (a spec or an
    item as JSON: parsed as the runner parses it)."""
    item = Item.from_json(item) if isinstance(item, dict) else item
    spec = spec.to_json() if isinstance(spec, RunSpec) else spec
    where = {"host": spec.get("server_host", "127.0.0.1"), "port": int(spec["port"])}
    return (item.serve.argv(model=model, **where),
            [r.argv(item.client, model=model, vllm_version=vllm_version, **where) for r in item.bench])
