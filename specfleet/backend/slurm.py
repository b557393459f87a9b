"""Campaigns under Slurm (`scheduler: {kind: slurm}`, docs/slurm.md): the bastion never opens SSH. It asks
Slurm which nodes and GPUs there are, splits the plan over them, writes runner.pyz and every node's run
spec on the shared path and submits one job whose steps run the runner on every node
(`runner.pyz slurm-step`); it follows the job and reads results on the shared path. The parts are in
specfleet/slurm/ (the sbatch script, the Slurm commands, what is written on the shared path, the site
check); this module is the backend's verbs over them."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..exits import EXIT_FAILED
from ..step import Status
from . import Fetched, Placement, Run

RUN_STEP = "slurm job"  # the step each node's outcome of the job is recorded under (the recap's line)


@dataclass(frozen=True)
class SlurmPlacement:
    """What `place` leaves for `start`: the job to submit, or the job of this campaign already active."""

    job: object = None          # slurm.script.Job, written on the shared path, accepted by sbatch --test-only
    active_job: str | None = None
    hosts: tuple = ()           # the hosts the job runs on (those a failed site check left out are not)


class SlurmBackend:
    kind = "slurm"

    def __init__(self, cfg):
        self.cfg = cfg  # specfleet.scheduler.SlurmScheduler, the inventory's `scheduler:` block

    def place(self, run: Run, *, pins, gate_runs: int, results: Path,
              durations_from: str | None = None) -> Placement | None:
        """As over SSH; measured item times come from `durations_from` only (the nodes' run folders on the
        shared path are not read before the split)."""
        from ..campaign import format_split, split
        from ..campaign.schedule import measured
        from ..report.scan.cells import write_placed
        from ..slurm import cli, dispatch
        from ..slurm.script import SCRIPT, sbatch_argv, slurm_dir
        cfg, p, inv, console = self.cfg, run.plan, run.inv, run.console
        prev = dispatch.last_job(cfg, p.campaign)
        if prev and cli.is_active(j := cli.job(cfg, prev["job_id"])):
            console.print(f"job {prev['job_id']} of campaign {p.campaign} is {cli.job_state(j)}: following it "
                          f"(`fab stop --plan ...` cancels it)", markup=False)
            return Placement({}, detail=SlurmPlacement(active_job=prev["job_id"], hosts=tuple(run.fleet.hosts)))
        hosts = dispatch.without_failed_site_check(inv, cfg, p, run.fleet.hosts, console)
        nodes = dispatch.slurm_nodes(cfg, inv, hosts, p)
        dispatch.check_account(inv, cfg, console)
        queues = split(p, nodes, pins=pins, **measured.for_split(p, {}, durations_from))
        console.print(format_split(queues, nodes), markup=False)
        job, _ = dispatch.place(cfg, p, hosts, queues, nodes)
        console.print(f"sbatch script: {os.path.join(slurm_dir(cfg, p.campaign), SCRIPT)}", markup=False)
        try:
            cli.submit(cfg, sbatch_argv(cfg, job, test_only=True))
        except cli.SlurmError as e:
            raise cli.explain_refusal(inv, cfg, e) from None
        if run.check:
            console.print("check mode: sbatch --test-only accepted the job; nothing submitted", markup=False)
            return None
        write_placed(p, queues.queues, results / p.campaign)  # as over SSH: fab collect reads these queues
        return Placement(queues.queues, detail=SlurmPlacement(job=job, hosts=tuple(hosts)), split=queues)

    def start(self, run: Run, placement: Placement, *, wait: bool, poll: float) -> None:
        from ..slurm import cli, dispatch
        from ..slurm.script import JOBS, sbatch_argv, slurm_dir
        cfg, p, console = self.cfg, run.plan, run.console
        run.fleet.interrupt_hints = [  # on Ctrl-C from here on
            "the Slurm job goes on without fab;",
            f"follow it: `{run.command}` again; progress: `fab status --plan {run.plan_arg}`; "
            f"cancel it: `fab stop --plan {run.plan_arg}`"]
        job_id = placement.detail.active_job
        if job_id is None:
            job = placement.detail.job
            job_id = cli.submit(cfg, sbatch_argv(cfg, job))
            records = dispatch.jobs(cfg, p.campaign) + [{
                "job_id": job_id, "nodes": list(job.nodes), "gpus_per_node": job.gpus_per_node, "token": job.token,
                "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
            dispatch.write_atomic(os.path.join(slurm_dir(cfg, p.campaign), JOBS), json.dumps(records, indent=1) + "\n")
            console.print(f"submitted Slurm job {job_id} on {','.join(job.nodes)} ({job.gpus_per_node} GPU(s) per "
                          "node)", markup=False)
            dispatch.wait_started(cfg, run.inv, p, job_id, job, console)
        if wait:
            self._follow(run, job_id, placement.detail.hosts, poll, placement.split)

    def _follow(self, run: Run, job_id: str, hosts, poll: float, split=None) -> None:
        """The job until it ends: each node's progress line when it changes, then the predicted and the
        measured makespan (`split`: the split this run placed); a node whose queue did not finish fails
        with why, and the `--exclude` that runs the campaign again without it."""
        from ..campaign.follow import progress_line
        from ..slurm import cli, dispatch
        cfg, p, console = self.cfg, run.plan, run.console
        last = {}
        while True:
            j = cli.job(cfg, job_id)
            active = cli.is_active(j)
            for h in hosts:
                line = progress_line(h.name, dispatch.view(cfg, p, h.name, active))
                if last.get(h.name) != line:
                    console.print(line, markup=False)
                    last[h.name] = line
            if active:
                time.sleep(poll)
                continue
            state = cli.job_state(j)
            console.print(f"Slurm job {job_id}: {state}", markup=False)
            if split is not None:
                from ..campaign.schedule.measured import makespan_line
                views = {h.name: dispatch.view(cfg, p, h.name, False) for h in hosts}
                console.print(makespan_line(split, views), markup=False, soft_wrap=True)
            failed = {} if "CANCELLED" in state else dispatch.failed_nodes(cfg, p, hosts)
            for node, why in failed.items():
                console.print(f"node {node} failed: {why}", markup=False)
                run.fleet.record_local_for(node, RUN_STEP, Status.FAILED, why)
            if failed:
                console.print(dispatch.exclude_hint(p, list(failed)), markup=False)
            elif state != "COMPLETED":
                run.fleet.verdict(EXIT_FAILED, f"Slurm job {job_id} ended {state}")
            return

    def view(self, run: Run):
        from ..slurm import cli, dispatch
        cfg, p = self.cfg, run.plan
        rec = dispatch.last_job(cfg, p.campaign)
        if not rec:
            run.console.print(f"campaign {p.campaign}: no Slurm job submitted yet", markup=False)
            return {}
        j = cli.job(cfg, rec["job_id"])
        run.console.print(f"Slurm job {rec['job_id']}: {cli.job_state(j)}"
                          + (f" ({j.get('state_reason')})" if j and j.get("state_reason") not in (None, "None") else "")
                          + (f", restarts {j.get('restart_cnt')}" if j and j.get("restart_cnt") else ""), markup=False)
        return {h.name: dispatch.view(cfg, p, h.name, cli.is_active(j)) for h in run.fleet.hosts}

    def stop(self, run: Run, wait_s: float = 180) -> None:
        """scancel: Slurm sends SIGTERM to every step (the runners stop their servers cleanly), SIGKILL
        after KillWait; waits for the job to end."""
        from ..slurm import cli, dispatch
        cfg = self.cfg
        rec = dispatch.last_job(cfg, run.plan.campaign)
        if not rec or not cli.is_active(cli.job(cfg, rec["job_id"])):
            run.console.print("no Slurm job of this campaign is active", markup=False)
            return
        cli.cancel(cfg, rec["job_id"])
        deadline = time.monotonic() + wait_s
        while cli.is_active(j := cli.job(cfg, rec["job_id"])) and time.monotonic() < deadline:
            time.sleep(0.5)
        run.console.print(f"Slurm job {rec['job_id']}: {cli.job_state(j)}", markup=False)
        if cli.is_active(j):
            run.fleet.verdict(EXIT_FAILED, f"Slurm job {rec['job_id']} still {cli.job_state(j)} {wait_s:g} s "
                                           "after scancel")

    def fetch(self, run: Run, dest: Path) -> Fetched:
        from ..slurm import dispatch
        refused, notes = dispatch.collect(run.fleet, run.inv, run.plan, dest)
        return Fetched(refused=refused, notes=notes)

    def provision(self, run: Run, roles: list, undo, *, partial: bool, options: dict) -> None:
        """The site roles and the venv, checked as a job step on every node (specfleet/slurm/site_check.py):
        under Slurm the site owns its nodes, and nothing on them is changed."""
        from ..errors import UserError
        from ..roles import Context, registry
        from ..slurm import site_check
        if partial or undo:
            raise UserError(f"{run.inv.path}: field 'scheduler': under Slurm fab provision only checks what the "
                            "site owns (--only and --revert change nodes; run them over SSH, without the scheduler "
                            "block)")
        ctx = Context(inventory=run.inv, check=True)
        failed = site_check.provision(run.inv, run.fleet.hosts, lambda h: [
            s for name in site_check.SITE_ROLES for s in registry()[name].steps(h, ctx)], run.console)
        for h in run.fleet.hosts:
            if h.name in failed:
                run.fleet.record_local_for(h.name, "site check", Status.FAILED, failed[h.name])
            else:
                run.fleet.record_local_for(h.name, "site check", Status.OK, "site check passed")
