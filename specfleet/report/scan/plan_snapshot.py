"""plan.json: the plan a campaign's results were measured with, beside its host folders, and what
changed in the plan since. `fab collect` / `fab report` write it while the results carry the plan's
hash; `fab compare` reads two of them; the report says when its results carry another plan hash
(`plan_drift`; docs/report.md, "Results of another version of the plan").
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ... import untrusted_json

PLAN_SNAPSHOT = "plan.json"
# plan fields that change how the report judges or where a cell is placed, never what a run measures
NOT_MEASURED = ("equivalence.metric", "equivalence.concurrency", "equivalence.tolerance_pct", "model.weights_gib")
NOT_MEASURED_SUFFIX = ".load_estimate_s"  # configurations.<name>.load_estimate_s: the split's estimate
SHOWN = 4  # changed fields named in the line; the rest are counted


def write_snapshot(campaign_dir: Path, plan) -> None:
    """plan.json: the plan as hashed, with its assertions (not hashed), for `fab compare`."""
    data = {"plan_hash": plan.plan_hash(), "plan": json.loads(plan.canonical_json()),
            "assertions": [a.model_dump(exclude_none=True) for a in plan.assertions]}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    p = Path(campaign_dir) / PLAN_SNAPSHOT
    if not p.is_file() or p.read_text(encoding="utf-8") != text:
        p.write_text(text, encoding="utf-8")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def _by_name(plan: dict) -> dict:
    p = dict(plan)
    p["configurations"] = {c.get("name"): {k: v for k, v in c.items() if k != "name"}
                           for c in plan.get("configurations") or [] if isinstance(c, dict)}
    return p


def field_diffs(a: dict, b: dict) -> list[tuple[str, str, str]]:
    """(field, value in a, value in b) of every plan field that differs, configurations by name."""
    fa, fb = _flatten(_by_name(a)), _flatten(_by_name(b))
    return [(k, json.dumps(fa.get(k, "<absent>")), json.dumps(fb.get(k, "<absent>")))
            for k in sorted(set(fa) | set(fb)) if fa.get(k, "<absent>") != fb.get(k, "<absent>")]


def measured(field: str) -> bool:
    """Whether a plan field changes what a run measures (else: the report's rule, a placement estimate)."""
    return field not in NOT_MEASURED and not field.endswith(NOT_MEASURED_SUFFIX)


def plan_drift(campaign_dir: Path, hashes: dict[str, list[str]], plan_hash: str, plan_fields: dict,
               plan_path: str) -> tuple[str, bool] | None:
    """(one line, whether what is measured may have changed) when the results carry plan hashes
    (`hashes`: hash -> node/config items) of which none is the plan's; None when one is, or none is
    recorded. Several hashes are the gate's MIXED PLANS as well. What changed is named where
    plan.json still holds the plan of the results' hash (written by the last report that matched)."""
    if not hashes or plan_hash in hashes:
        return None
    snap = untrusted_json.loads_or_none((Path(campaign_dir) / PLAN_SNAPSHOT).read_text(encoding="utf-8",
                                        errors="replace")) if (Path(campaign_dir) / PLAN_SNAPSHOT).is_file() else None
    then = snap.get("plan") if isinstance(snap, dict) and snap.get("plan_hash") in hashes else None
    diffs = field_diffs(then, plan_fields) if isinstance(then, dict) else None
    changed = diffs is None or any(measured(f) for f, _, _ in diffs)
    if diffs is None:
        what = f"what changed is not known ({PLAN_SNAPSHOT} does not hold the plan of that hash)"
    else:
        what = "changed since: " + "; ".join(f"{f} {x} -> {y}" for f, x, y in diffs[:SHOWN]) + (
            f" and {len(diffs) - SHOWN} more" if len(diffs) > SHOWN else "")
    head = (f"{Path(campaign_dir)}: the results carry plan hash {', '.join(sorted(hashes))}; {plan_path} "
            f"hashes {plan_hash} now: {what}")
    if not changed:
        return f"{head}. Only how the report judges or places them changed: the results stand", False
    return (f"{head}. The results are reported under the plan as it is now, and no llm-d export is "
            f"written for them; `fab bench --plan {shlex.quote(plan_path)}` measures them again under it"), True
