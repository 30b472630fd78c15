"""``attune project RECIPE --sweep``: every layout the sweep ranks is one Megatron-LM accepts and the projection
fits, fastest first, each scored as ``project`` scores it alone."""

from __future__ import annotations

import json

import pytest

from attune import cli
from attune.core import legality
from attune.projection import api, sweep

DENSE = {"--num-layers": "32", "--hidden-size": "4096", "--ffn-hidden-size": "14336", "--num-attention-heads": "32",
         "--group-query-attention": True, "--num-query-groups": "8", "--seq-length": "8192", "--vocab-size": "128256",
         "--swiglu": True, "--micro-batch-size": "1", "--global-batch-size": "128", "--bf16": True,
         "--use-distributed-optimizer": True, "--tensor-model-parallel-size": "1"}


def test_every_ranked_layout_is_legal_fits_and_scores_as_project_does():
    result = sweep.sweep(DENSE, 16, "H100", top=8)
    assert result["tried"] >= result["legal"] > result["fit"] >= len(result["best"]) == 8
    rates = [item["tokens_per_s_per_gpu"] for item in result["best"]]
    assert rates == sorted(rates, reverse=True)
    for item in result["best"]:
        layout = sweep.Layout(**item["layout"])
        args = layout.args(DENSE)
        assert [v.rule for v in legality.check(args, {}, 16, "H100", trusted=args)
                if v.rule != "cuda-device-max-connections"] == []
        alone = api.project(args, 16, "H100")
        assert alone["memory"]["fits"] and alone["tokens_per_s_per_gpu"] == pytest.approx(item["tokens_per_s_per_gpu"])
    assert "EP" not in result["best"][0]["text"]  # a dense model has no expert layout
    # the band is the calibration's own leave-one-out error for dense models on the GPU (params.json)
    import json
    loo = json.loads(api.PARAMS.read_text())["loo"]
    assert result["error_band"] == pytest.approx(loo["by_gpu_kind"]["H100"]["dense"] / 100)
    assert "dense models on this GPU" in result["error_band_source"]


def test_the_error_band_is_the_calibrations_error_for_the_recipes_kind_of_model_on_its_gpu(tmp_path):
    """MoE models are projected several times less closely than dense ones: a MoE recipe's sweep shows the MoE
    error on its GPU, or on every GPU where its GPU has too few MoE rows; a GPU without rows has no band."""
    import json
    loo = json.loads(api.PARAMS.read_text())["loo"]
    cells = loo["by_gpu_kind"]
    assert cells["H100"]["moe"] > 2 * cells["H100"]["dense"]  # the reason the kinds are apart
    moe = dict(DENSE, **{"--num-experts": "8", "--moe-router-topk": "2", "--moe-ffn-hidden-size": "1024",
                         "--moe-grouped-gemm": True, "--moe-token-dispatcher-type": "alltoall"})
    result = sweep.sweep(moe, 16, "H100", top=1)
    assert result["error_band"] == pytest.approx(cells["H100"]["moe"] / 100) and result["best"]
    assert "moe models on this GPU" in sweep.text(result)
    missing = next((gpu, kind) for gpu in loo["by_gpu"] for kind in loo["by_kind"] if kind not in cells.get(gpu, {}))
    band, source = sweep.error_band(missing[0], missing[1])
    assert band == pytest.approx(loo["by_kind"][missing[1]] / 100) and "too few on this GPU" in source
    assert sweep.error_band("MI300X", "moe") == (None, "unknown: no calibration rows on this GPU")


def test_the_best_beats_every_other_legal_layout_that_fits():
    result = sweep.sweep(DENSE, 8, "H100", top=1)
    best = result["best"][0]["tokens_per_s_per_gpu"]
    for layout in sweep.layouts(DENSE, 8, 8):
        args = layout.args(DENSE)
        if legality.check(args, {}, 8, "H100", trusted=args):
            continue
        try:
            out = api.project(args, 8, "H100")
        except api.ConfigError:
            continue
        if out["memory"]["fits"]:
            assert out["tokens_per_s_per_gpu"] <= best + 1e-9


def test_the_verb_prints_the_sweep_and_exits_1_when_nothing_fits(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    words = " ".join("%s %s" % (flag, "" if value is True else value) for flag, value in DENSE.items())
    recipe.write_text("apiVersion: ray.io/v1\nkind: RayJob\nmetadata:\n  name: x\nspec:\n  entrypoint: python3 "
                      "pretrain_gpt.py %s\n" % words)
    assert cli.main(["project", str(recipe), "--hardware", "H100", "--gpus", "16", "--sweep", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("hardware: H100 x 16\nlayouts: ") and "\n1: TP " in out and "\n2: TP " in out
    assert "\n3: " not in out
    assert cli.main(["project", str(recipe), "--hardware", "H100", "--gpus", "1", "--sweep", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["best"] == []  # 8B with its optimizer on one GPU: nothing fits


def test_layers_that_do_not_divide_get_a_balanced_hand_written_layout():
    """126 layers (Llama-3.1-405B's) over PP 4 x VP 4: no even split, so the sweep writes a layout balanced by
    cost (embedding first, the loss last, the last stage lighter) that legality accepts and the projection fits;
    where PP x VP divides the layers it writes none; a heavier recompute of a layout that fits lighter is not
    tried (it only adds work)."""
    uneven = dict(DENSE, **{"--num-layers": "126", "--hidden-size": "2048", "--ffn-hidden-size": "8192",
                            "--num-attention-heads": "16", "--seq-length": "2048"})
    layouts = list(sweep.layouts(uneven, 64, 8))
    written = [lay for lay in layouts if lay.layout]
    assert written and all(lay.pp * lay.vp and 126 % (lay.pp * lay.vp) for lay in written)
    assert not [lay for lay in layouts if not lay.layout and lay.pp > 1 and 126 % (lay.pp * lay.vp)]
    one = next(lay for lay in written if (lay.pp, lay.vp) == (4, 4))
    stages = one.layout.split("|")
    assert len(stages) == 16 and stages[0].startswith("E") and stages[-1].endswith("L")
    assert sum(stage.count("t") for stage in stages) == 126 and stages[-1].count("t") <= stages[1].count("t")
    args = one.args(uneven)
    assert [v.rule for v in legality.check(args, {}, 64, "H100", trusted=args)
            if v.rule != "cuda-device-max-connections"] == []
    result = sweep.sweep(uneven, 64, "H100", top=40)
    assert any(item["layout"]["layout"] for item in result["best"])
    kinds = {}
    for item in result["best"]:
        key = tuple(v for k, v in sorted(item["layout"].items()) if k != "recompute")
        kinds.setdefault(key, []).append(item["layout"]["recompute"])
    assert all(len(recomputes) == 1 for recomputes in kinds.values())  # one recompute variant per layout
