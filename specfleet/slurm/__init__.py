"""Campaigns on Slurm (docs/slurm.md): the inventory's `scheduler: {kind: slurm, ...}` makes `fab bench`
submit one job whose steps run the same runner on every allocated node, with results on a shared path.

(specfleet/scheduler.py: the inventory's `scheduler:` block, validated; one line naming file and field)
script.py   the sbatch script, rendered from values through specfleet.quoting (pure)
(what runs on each node is the worker program's `slurm-step`: specfleet/worker/slurm_step.py, in runner.pyz)
cli.py      the Slurm commands specfleet runs on the bastion (sbatch, squeue --json, scontrol, scancel)
dispatch.py `fab bench` / `fab status` / `fab stop` / `fab collect` under Slurm
site_check.py `fab provision` under Slurm: the site roles and the venv checked in a job, nothing changed
"""
