"""An item's argv as the runner renders them (specfleet/worker/runspec.py), for the tests that read a
spec's commands: the placeholders where model and version are not given."""
from specfleet.worker.runspec import item_parts


def rendered(spec: dict, item: dict, *, model: str | None = None,
             vllm_version: str | None = None) -> tuple[list[str], list[list[str]]]:
    """An item's `vllm serve` argv and its bench runs' argv on the spec's host and port."""
    serve, client, runs = item_parts(item)
    where = {"host": spec.get("server_host", "127.0.0.1"), "port": int(spec["port"])}
    return (serve.argv(model=model, **where),
            [r.argv(client, model=model, vllm_version=vllm_version, **where) for r in runs])
