"""Published pre-training recipes (theory/models/published_recipes.json, theory/models/pretraining.py)
and the GPT-NeoX reader that reads the Pythia configurations they name (theory/models/neox.py, issue 41 item 3)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from remprop.theory import Architecture, model_spec
from remprop.theory.models import published_recipes, shipped_configs
from remprop.theory.models import pretraining as recipes_module
from remprop.theory.rem import partial_rotary_correlation, rope_correlation, rope_frequencies, rope_mean_correlation

from cli_checks import assert_one_line_error, run_cli

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"
#: The section of docs/training.md that shows the table.
SECTION = "## Published pre-training recipes"
#: Pythia's published sizes (Biderman et al. 2023, arXiv 2304.01373, Table 1): layers, model dim, heads.
PYTHIA_TABLE_1 = {"pythia-70m": (6, 512, 8), "pythia-160m": (12, 768, 12), "pythia-410m": (24, 1024, 16),
                  "pythia-1b": (16, 2048, 8), "pythia-1.4b": (24, 2048, 16), "pythia-2.8b": (32, 2560, 32),
                  "pythia-6.9b": (32, 4096, 32), "pythia-12b": (36, 5120, 40)}


# -- the docs table, written from the JSON ----------------------------------------------------------

def _rate(x):
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _count(n):
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def render_table(rows) -> str:
    """The markdown table and the per-row notes of docs/training.md's section, from the rows."""
    lines = ["| recipe | `remprop check` | parameters | d | L | peak lr | warm-up | steps | batch (tokens) | "
             "beta2 | weight decay | schedule | source |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.name} | `{r.model}` | {_count(r.parameters)} | {r.width} | {r.depth} | "
                     f"{_rate(r.peak_lr)} | "
                     f"{r.warmup_steps} | {r.total_steps} | {_count(r.batch_tokens)} | {r.beta2:g} | "
                     f"{r.weight_decay:g} | {r.schedule} | {r.source} |")
    lines.append("")
    lines.append("Initialisation and notes per recipe:")
    lines.append("")
    for r in rows:
        lines.append(f"* **{r.name}**: init: {r.init}. {r.notes[:1].upper()}{r.notes[1:]}.")
    return "\n".join(lines) + "\n"


def _docs_table():
    text = DOCS.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/training.md has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    start, end = "<!-- published-recipes table: from theory/models/published_recipes.json -->\n", "<!-- end -->"
    assert start in body and end in body
    return body.split(start, 1)[1].split(end, 1)[0]


def test_the_docs_table_is_the_json_table():
    assert _docs_table() == render_table(published_recipes()), \
        "docs/training.md's recipe table differs from published_recipes.json (regenerate it with render_table)"


# -- the table ---------------------------------------------------------------------------------------

def test_every_row_names_a_shipped_config_of_its_width_and_depth():
    rows = published_recipes()
    assert len(rows) >= 12 and len({r.name for r in rows}) == len(rows)
    for r in rows:
        assert r.model in shipped_configs(), r.model
        spec = model_spec(r.model)
        assert (spec.width, spec.depth) == (r.width, r.depth), r.name
        assert 0 < r.warmup_steps < r.total_steps and 0 < r.beta2 < 1 and r.peak_lr > 0
        assert r.source.strip() and r.schedule in recipes_module.SCHEDULES
    # held out for the lead's check: no other GPT-3 or LLaMA size, and no LLaMA row without a published rate
    assert {r.model for r in rows if r.name.startswith("GPT-3")} == {"gpt2", "gpt2-medium"}
    assert not [r for r in rows if "llama" in r.model.lower()]


def test_pythia_parameter_counts_follow_from_the_configs():
    """The published totals (embeddings included, untied) against the count of the config's GPT-NeoX
    weights: per layer qkv 3d^2 + 3d, dense d^2 + d, MLP 8d^2 + 5d, two LayerNorms 4d; the final
    LayerNorm 2d; embed_in and embed_out V d each."""
    rows = [r for r in published_recipes() if r.model.startswith("pythia")]
    assert {r.model for r in rows} == set(PYTHIA_TABLE_1)
    for r in rows:
        cfg = json.loads((recipes_module.RECIPES_FILE.parent / "configs" / f"{r.model}.json").read_text())
        d, depth = cfg["hidden_size"], cfg["num_hidden_layers"]
        vocab, d_ff = cfg["vocab_size"], cfg["intermediate_size"]
        layer = (3 * d * d + 3 * d) + (d * d + d) + (2 * d * d_ff + d_ff + d) + 4 * d
        assert r.parameters == depth * layer + 2 * d + 2 * vocab * d, r.name


def test_a_malformed_row_is_refused_naming_the_field(tmp_path, monkeypatch):
    good = json.loads(recipes_module.RECIPES_FILE.read_text())
    for change, field in ((dict(beta2=1.5), "beta2"), (dict(schedule="step"), "schedule"),
                          (dict(warmup_steps=10 ** 9), "warmup_steps"), (dict(peak_lr=-1e-3), "peak_lr")):
        row = dict(good["recipes"][0], **change)
        path = tmp_path / "recipes.json"
        path.write_text(json.dumps({"recipes": [row]}))
        monkeypatch.setattr(recipes_module, "RECIPES_FILE", path)
        recipes_module.published_recipes.cache_clear()
        with pytest.raises(ValueError, match=f"row 0 .*{field}"):
            recipes_module.published_recipes()
    recipes_module.published_recipes.cache_clear()


# -- partial rotary --------------------------------------------------------------------------------

@pytest.mark.parametrize("head_dim, rotary_dim", [(64, 16), (80, 20), (128, 128)])
def test_partial_rotary_correlation_is_the_sum_over_every_coordinate_pair(head_dim, rotary_dim):
    """c(k) summed directly over the head's pairs (rotated at b^(-2i/r), unrotated at frequency 0)."""
    k = np.arange(0, 300)
    theta = np.concatenate([rope_frequencies(rotary_dim), np.zeros((head_dim - rotary_dim) // 2)])
    direct = np.cos(k[:, None] * theta).mean(axis=1)
    mixed = partial_rotary_correlation(rope_correlation(k, rotary_dim), head_dim, rotary_dim)
    np.testing.assert_allclose(mixed, direct, rtol=0, atol=1e-12)


def test_an_architecture_with_partial_rotary_mixes_its_mean_correlation():
    full = Architecture(norm="pre", positions="rope", seq_len=512, head_dim=64, heads=4)
    part = full.replace(rotary_dim=16)
    t = 512
    pairs = np.arange(1, t)
    weights = 2.0 * (t - pairs) / (t * (t - 1))  # the ordered pairs m != l at distance k
    theta = np.concatenate([rope_frequencies(16), np.zeros(24)])
    direct = float(np.sum(weights * np.cos(pairs[:, None] * theta).mean(axis=1)))
    assert part.mean_rope_correlation == pytest.approx(direct, abs=1e-9)
    assert full.mean_rope_correlation < part.mean_rope_correlation < 1.0
    assert full.replace(rotary_dim=64).mean_rope_correlation == full.mean_rope_correlation
    for bad in (15, 66, 0):
        with pytest.raises(ValueError, match="rotary_dim"):
            full.replace(rotary_dim=bad)


# -- the GPT-NeoX reader ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PYTHIA_TABLE_1))
def test_the_neox_reader_gives_pythia_its_published_shape(name):
    spec = model_spec(name)
    arch = spec.architecture
    layers, width, heads = PYTHIA_TABLE_1[name]
    assert (spec.family, spec.depth, spec.width, spec.heads) == ("gpt_neox", layers, width, heads)
    assert (arch.norm, arch.norm_type, arch.mlp, arch.block_form) == ("pre", "layer", "dense", "parallel")
    assert arch.positions == "rope" and arch.head_dim == width // heads
    assert arch.rotary_dim == int(0.25 * arch.head_dim) and spec.causal
    rotated = rope_mean_correlation(spec.seq_len, arch.rotary_dim, arch.rope_base)
    assert arch.mean_rope_correlation == pytest.approx(0.25 * rotated + 0.75, rel=1e-12)
    assert spec.d_ff == 4 * width and spec.beta == pytest.approx(0.02 ** 2 * width / np.sqrt(np.log(2048)))
    assert any("small_init" in note and "wang_init" in note for note in spec.assumptions)


def _neox(**changes):
    cfg = json.loads((recipes_module.RECIPES_FILE.parent / "configs" / "pythia-70m.json").read_text())
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


def test_sequential_neox_and_the_transformers_5_spelling():
    assert model_spec(_neox(use_parallel_residual=False)).architecture.block_form == "sequential"
    moved = _neox(rotary_pct=None, rotary_emb_base=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    arch = model_spec(moved).architecture
    assert (arch.rotary_dim, arch.rope_base) == (32, 10000.0)
    assert model_spec(_neox(rotary_pct=1.0)).architecture.rotary_dim is None  # every coordinate rotates
    with pytest.raises(ValueError, match="rotary_pct .* disagrees"):
        model_spec(_neox(rope_parameters={"partial_rotary_factor": 0.5}))


def test_a_transformers_gpt_neox_config_reads_as_its_file():
    transformers = pytest.importorskip("transformers")
    cfg = _neox()
    built = transformers.GPTNeoXConfig(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    ours, theirs = model_spec(cfg), model_spec(built)
    assert theirs.architecture.to_dict() == ours.architecture.to_dict()
    assert (theirs.beta, theirs.q0, theirs.rho0) == (ours.beta, ours.q0, ours.rho0)


@pytest.mark.parametrize("change, field", [
    (dict(rotary_pct=0.0), "config.rotary_pct"), (dict(rotary_pct=1.5), "config.rotary_pct"),
    (dict(rotary_pct=-0.25), "config.rotary_pct"), (dict(rotary_pct="quarter"), "config.rotary_pct"),
    (dict(rotary_pct=0.01), "config.rotary_pct"), (dict(hidden_size=None), "config.hidden_size"),
    (dict(rotary_emb_base=1.0), "config.rotary_emb_base"), (dict(use_parallel_residual="yes"),
                                                             "config.use_parallel_residual")])
def test_a_bad_neox_config_is_refused_in_one_line(change, field, tmp_path, capsys):
    with pytest.raises(ValueError, match=re.escape(field)):
        model_spec(_neox(**change))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_neox(**change)))
    code, _, err = run_cli(capsys, "check", path, "--out", tmp_path, "--no-figure")
    assert_one_line_error(code, err, field)


def test_check_pythia_160m_runs_end_to_end(tmp_path, capsys):
    code, out, err = run_cli(capsys, "check", "pythia-160m", "--depth", 2, "--out", tmp_path, "--no-figure")
    assert code == 0, err
    assert "gpt_neox" in out and "lr ceiling" in out and "rotary_pct = 0.25" in out
    code, out, err = run_cli(capsys, "check", "pythia-160m", "--depth", 2, "--out", tmp_path, "--no-figure", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["model"]["architecture"]["rotary_dim"] == 16
    assert report["model"]["architecture"]["block_form"] == "parallel"
    assert np.isfinite(report["lr_ceiling"]["value"]) and report["lr_ceiling"]["value"] > 0


@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_simulated_partial_rotary_follows_the_mixed_correlation(beta):
    """Torch attention rotating 8 of 32 coordinates per head (validation.simulator) at a high input
    cosine (0.6, where cbar matters): the measured layer-1 Y2 lies near the REM at the mixed cbar_T
    and far from the full-RoPE one. Tolerance: the full-RoPE law's own finite-T error at this state
    (it overestimates Y2 where the shared part is large, docs/theory.md section 15): 15 %."""
    torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
    from remprop.theory import participation_moment
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.settings import SimulationSettings
    from remprop.validation.simulator import SimulatedStack

    torch.set_num_threads(min(2, torch.get_num_threads()))
    width, seq_len, rho0, seeds = 128, 64, 0.6, 8
    full = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_w2=1.0, sigma_b2=0.0,
                        sigma_v2=1.0, sigma_o2=1.0, sigma_w2_out=1.0, heads=4, seq_len=seq_len, positions="rope",
                        head_dim=32, rope_base=100.0)
    part = full.replace(rotary_dim=8)
    measured = []
    for seed in range(seeds):
        stack = SimulatedStack(part, beta, 1, seed=seed,
                               sim=SimulationSettings(width=width, seq_len=seq_len, dtype="float64", device="cpu"))
        x = gaussian_tokens(1.0, rho0, count=2, seq_len=seq_len, width=width, seed=seed, dtype="float64",
                            device="cpu").tokens
        measured.append(stack.trace(x).y2[:, 0].mean())
    measured = float(np.mean(measured))
    q, p = part.attention_input(1.0, rho0)
    mixed, rotated_all = (float(participation_moment(beta, q, p * arch.mean_rope_correlation, seq_len))
                          for arch in (part, full))
    assert abs(measured - mixed) <= 0.15 * mixed
    assert abs(measured - mixed) < 0.5 * abs(measured - rotated_all)


def test_pythia_hub_names_and_phi3_partial_rotary():
    assert model_spec("EleutherAI/pythia-410m").size() == model_spec("pythia-410m").size()
    cfg = json.loads((recipes_module.RECIPES_FILE.parent / "configs" / "phi-3-mini.json").read_text())
    arch = model_spec(dict(cfg, partial_rotary_factor=0.5)).architecture
    assert arch.rotary_dim == arch.head_dim // 2
    assert model_spec(cfg).architecture.mean_rope_correlation < arch.mean_rope_correlation < 1.0
    with pytest.raises(ValueError, match="config.partial_rotary_factor"):
        model_spec(dict(cfg, partial_rotary_factor=1.5))


def test_the_rotary_dim_option(tmp_path, capsys):
    code, _, err = run_cli(capsys, "propagate", "--positions", "rope", "--head-dim", 64, "--seq-len", 64,
                           "--rotary-dim", 70, "--depth", 2)
    assert_one_line_error(code, err, "--rotary-dim")
    code, out, err = run_cli(capsys, "check", "pythia-160m", "--depth", 2, "--rotary-dim", 64, "--no-figure",
                             "--out", tmp_path, "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["architecture"]["rotary_dim"] == 64  # the what-if: every coordinate turns
