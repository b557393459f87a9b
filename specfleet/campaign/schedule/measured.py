"""Measured durations for the split, and the measured makespan beside the predicted one.

The split's item times are estimates (split.item_s: METHOD_SPEED, TP_EXPONENT, not measured) unless a
campaign has run: a finished item's record in a run folder's state.json (started_at, finished_at of
its last attempt; 1 s resolution) gives the seconds it took on that node. A configuration counts as
measured when every item of it in that folder's run.json is done (its repeats on their own server
starts add up); a crossover round's items, added by the runner, are not counted. Where several
folders measured it, each node keeps its own figure; a node that did not run it gets the mean of the
others. Sources: the workers' run folders of this campaign (`fab bench` reads them anyway) where they
were placed from another plan (the same plan resumes as placed: its split is not redone), and any
folder named by `fab bench --durations-from PATH` (a collected results/<campaign>, one host's folder,
or a work_dir/<campaign> copy).
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from ...plan import Plan, PlanError
from ...worker import layout

Run = tuple[str, dict | None, dict | None]   # (host, run.json, state.json)


def _t(stamp) -> float | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").timestamp()
    except (TypeError, ValueError):
        return None


def config_seconds(spec: dict | None, state: dict | None) -> dict[str, float]:
    """config -> seconds its items took in one run folder, for each configuration whose items are all done."""
    if not isinstance(spec, dict) or not isinstance(state, dict):
        return {}
    config_of = {it.get("name"): it.get("config", it.get("name")) for it in spec.get("items", []) if isinstance(it, dict)}
    took: dict[str, float] = {}
    missing = set()
    recs = {r.get("name"): r for r in state.get("items", []) if isinstance(r, dict)}
    for name, config in config_of.items():
        r = recs.get(name) or {}
        start, end = _t(r.get("started_at")), _t(r.get("finished_at"))
        if r.get("status") != "done" or start is None or end is None or end < start:
            missing.add(config)
            continue
        took[config] = took.get(config, 0.0) + end - start
    return {c: s for c, s in took.items() if c not in missing}


def read_folder(path: str | Path) -> list[Run]:
    """The run folders under `path` (itself, or its sub-folders: one per host), as (host, run.json, state.json).
    PlanError names the path when none is there or a file does not parse."""
    root = Path(path)
    folders = [root] if (root / layout.STATE).is_file() else sorted(p.parent for p in root.glob(f"*/{layout.STATE}"))
    if not folders:
        raise PlanError(f"--durations-from {path}: no {layout.STATE} in it or in a folder under it "
                        f"(name a collected results/<campaign> folder or one host's run folder)")
    runs = []
    for d in folders:
        try:
            state = json.loads((d / layout.STATE).read_text())
            spec = json.loads((d / layout.RUN_SPEC).read_text()) if (d / layout.RUN_SPEC).is_file() else None
        except (OSError, ValueError) as e:
            raise PlanError(f"--durations-from {path}: {d}: {type(e).__name__}: {e}") from None
        if spec is None:
            raise PlanError(f"--durations-from {path}: {d} has {layout.STATE} but no {layout.RUN_SPEC} "
                            f"(it maps the runner's items to configurations)")
        runs.append((state.get("host") or d.name if isinstance(state, dict) else d.name, spec, state))
    return runs


def for_split(plan: Plan, views: dict, durations_from: str | None = None) -> dict:
    """split()'s keyword arguments `durations` and `source`: measured item times of `plan`'s configurations
    from the workers' run folders (`views`: host -> RunnerView, its spec and state) and `durations_from`."""
    here = "this campaign's run folders on the workers"
    # a run folder placed from this very plan resumes as placed: re-splitting it on its own times
    # would move done or running configurations to other nodes (redone there, or RunnerBusy)
    ph = plan.plan_hash()
    runs = [(here, h, v.spec, v.state) for h, v in views.items()
            if v is not None and isinstance(v.spec, dict) and v.spec.get("plan_hash") != ph]
    if durations_from:
        runs += [(durations_from, *run) for run in read_folder(durations_from)]
    names = {c.name for c in plan.configurations}
    got: dict[str, dict[str, float]] = {}
    used = []
    for where, host, spec, state in runs:
        for config, s in config_seconds(spec, state).items():
            if config in names:
                got.setdefault(config, {})[host] = s
                used += [where] if where not in used else []
    where = f" (from {' and '.join(used)})"
    if not got:
        return {"durations": None, "source": None}   # split() says: the duration model
    rest = len(names) - len(got)
    return {"durations": {c: {"item_s": per_node} for c, per_node in got.items()},
            "source": f"measured for {len(got)} of {len(names)} configurations{where}"
                      + (f"; the other {rest}: the duration model (estimates, not measured)" if rest else "")}


def measured_makespan(views: dict) -> tuple[float | None, str]:
    """(seconds, how) of the campaign just followed: per node, the first item start to the last item end of
    the items this runner ran (state.json, 1 s resolution); the longest node. None when nothing ran."""
    spans, earlier = [], 0
    for v in views.values():
        items = [i for i in ((v.state or {}).get("items") or []) if isinstance(i, dict)] if v else []
        earlier += sum(i.get("phase") == "done earlier" for i in items)
        ran = [(_t(i.get("started_at")), _t(i.get("finished_at"))) for i in items if i.get("phase") != "done earlier"]
        ran = [(a, b) for a, b in ran if a is not None and b is not None]
        if ran:
            spans.append(max(b for _, b in ran) - min(a for a, _ in ran))
    how = f"first item start to last item end per node, from {layout.STATE} (1 s resolution)"
    if earlier:
        how += f"; {earlier} item(s) done by an earlier run are not in it (the prediction counts them)"
    return (max(spans) if spans else None), how


def makespan_line(split, views: dict) -> str:
    """The predicted makespan beside the measured one, for the end of `fab bench`."""
    got, how = measured_makespan(views)
    measured = f"{minutes(got)} ({how})" if got is not None else "not measured (no item ran to its end)"
    return f"makespan: predicted {minutes(split.makespan_s)} (durations: {split.source}); measured {measured}"


def minutes(s: float) -> str:
    return f"{s / 60:.1f} min = {s:.0f} s"
