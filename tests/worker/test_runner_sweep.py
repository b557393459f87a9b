"""The runner with the bench cells of a sweep: one server start for all cells, the prompt check per
cell (a category cell selects that category's prompts first), resume by done marker."""
import json

from specfleet.worker.runner import EXIT_FAILED, EXIT_OK


def dataset(bed):
    rows = [{"question_id": i, "category": "rag" if i in (3, 7, 11) else "qa", "turns": [f"question {i}?"]}
            for i in range(16)]
    bed.dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_category_cell_asking_more_prompts_than_the_category_holds_fails_before_the_load(bed):
    dataset(bed)
    plan = bed.plan(benchmark={"sweep": [{"concurrency": 16}, {"concurrency": 16, "category": "rag", "num_prompts": 4}],
                                "min_prompts_per_concurrency": 0})
    assert bed.run(bed.spec(plan, queue=["vanilla"])) == EXIT_FAILED, bed.log()
    it = bed.items()["vanilla"]
    assert it["phase"] == "failed during preflight"
    assert "holds 3 prompts of category rag, benchmark.num_prompts asks for 4" in it["error"]
    assert not (bed.run_dir / "vanilla.server.log").exists()


def test_every_cell_runs_on_one_server_start_and_a_second_run_redoes_nothing(bed):
    dataset(bed)
    plan = bed.plan(benchmark={"sweep": [{"concurrency": 16}, {"concurrency": 16, "category": "rag", "num_prompts": 3}],
                                "min_prompts_per_concurrency": 0})
    spec = bed.spec(plan, queue=["vanilla"])
    assert bed.run(spec) == EXIT_OK, bed.log()
    plain, rag = (json.loads((bed.run_dir / f"vanilla_{c}.json").read_text()) for c in ("conc16-n16", "conc16-cat_rag-n3"))
    assert (plain["num_prompts"], rag["num_prompts"]) == (16, 3)
    assert rag["category"] == "rag" and "category" not in plain
    log = (bed.run_dir / "vanilla.server.log").read_text()
    assert log.count("==== specfleet ") == 1  # one load for both cells
    done = (bed.run_dir / "vanilla.done").read_text()
    assert bed.run(spec) == EXIT_OK
    assert (bed.run_dir / "vanilla.done").read_text() == done and bed.items()["vanilla"]["phase"] == "done earlier"
