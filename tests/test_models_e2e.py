"""compile_model with the real toolchain: cache hits, failures, concurrent compiles."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from test_render import SLOT_EXAMPLES

from stanflow import models, toolchain
from stanflow.models import (
    CompileError,
    cache_key,
    compile_model,
    executables,
    program_path,
    render,
)
from stanflow.workflows import DATA_DIR

REPO_DIR = Path(__file__).resolve().parent.parent
PROGRAM_BLOCK = re.compile(r"^\s*(functions|data|parameters|model)\s*\{", re.MULTILINE)
"""A line opening a block of a Stan program; an include fragment has none."""

pytestmark = pytest.mark.e2e

TEMPLATE = """\
functions {
  #include loss.stanfunctions
}
data {
  real y;
}
parameters {
  real theta;
}
model {
  target += -loss(y - theta);
}
"""


def entry_key(source: Path, **render_kwargs) -> str:
    """The cache key compile_model uses for ``source`` with default options."""
    return cache_key(
        render(source, **render_kwargs),
        name=source.name.split(".")[0],
        toolchain=toolchain.identity(),
        cpp_options=models.DEFAULT_CPP_OPTIONS,
        stanc_options={},
    )


@pytest.fixture(scope="module")
def eight_schools(cmdstan):
    return compile_model(program_path("models/eight_schools_noncentered"))


def test_compiled_model_is_cached_threaded_and_samples(eight_schools, tmp_path):
    source = program_path("models/eight_schools_noncentered")
    entry = models.cache_dir() / entry_key(source)
    assert Path(eight_schools.exe_file) == entry / "eight_schools_noncentered"
    assert (entry / "eight_schools_noncentered.stan").read_text() == render(source)
    manifest = json.loads((entry / "stanflow.json").read_text())
    assert manifest["key"] == entry.name
    assert manifest["cpp_options"] == {"STAN_THREADS": True}
    assert eight_schools.exe_info()["STAN_THREADS"] == "true"

    data = json.loads((DATA_DIR / "eight_schools.json").read_text())
    fit = eight_schools.sample(
        data=data,
        chains=2,
        iter_warmup=150,
        iter_sampling=100,
        seed=5,
        show_progress=False,
        output_dir=tmp_path,
    )
    assert fit.stan_variable("theta").shape == (200, 8)


def test_cache_hit_does_not_recompile(eight_schools, monkeypatch):
    exe = Path(eight_schools.exe_file)
    mtime = exe.stat().st_mtime_ns

    def recompiles(*args, **kwargs):
        raise AssertionError("make called on a cache hit")

    monkeypatch.setattr(executables, "_make", recompiles)
    again = compile_model(program_path("models/eight_schools_noncentered"))

    assert again.exe_file == eight_schools.exe_file
    assert exe.stat().st_mtime_ns == mtime


def test_compile_error_carries_stanc_message_and_leaves_no_entry(cmdstan, tmp_path):
    template = tmp_path / "gibbs.stan"
    template.write_text(TEMPLATE)
    loss = tmp_path / "bad_loss.stanfunctions"
    loss.write_text(
        "real loss(real r) {\n  return abs(r)\n}\n"
    )  # missing ';' on line 2
    slots = {"loss.stanfunctions": loss}

    with pytest.raises(CompileError) as err:
        compile_model(template, slots=slots)

    message = str(err.value)
    assert "Syntax error" in message or "Semantic error" in message
    assert f"{loss}, line" in message  # mapped back to the slot's file
    assert "Syntax error" in err.value.console or "Semantic error" in err.value.console
    key = entry_key(template, slots=slots)
    assert not (models.cache_dir() / key).exists()
    assert not list(models.cache_dir().glob(f".tmp-{key}-*"))


def test_concurrent_compiles_of_one_model_compile_once(cmdstan, tmp_path):
    # A fresh program (unique comment -> unique key), bound through a slot.
    template = tmp_path / "gibbs.stan"
    template.write_text(f"// concurrency test {uuid.uuid4().hex}\n{TEMPLATE}")
    loss = tmp_path / "square.stanfunctions"
    loss.write_text("real loss(real r) {\n  return square(r);\n}\n")
    counter = tmp_path / "compiles.txt"
    script = textwrap.dedent(
        """
        import sys
        from stanflow.models import compile_model, executables

        real = executables._make

        def counting(*args, **kwargs):
            with open(sys.argv[3], "a") as f:
                f.write("compile\\n")
            return real(*args, **kwargs)

        executables._make = counting
        model = compile_model(sys.argv[1], slots={"loss.stanfunctions": sys.argv[2]})
        print(model.exe_file)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO_DIR), os.environ.get("PYTHONPATH")])
        ),
    }
    key = entry_key(template, slots={"loss.stanfunctions": loss})
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(template), str(loss), str(counter)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=600) for proc in procs]
        for proc, (_, stderr) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, stderr
        exes = {stdout.strip().splitlines()[-1] for stdout, _ in outputs}
        assert exes == {str(models.cache_dir() / key / "gibbs")}
        assert counter.read_text() == "compile\n"
        assert not list(models.cache_dir().glob(f".tmp-{key}-*"))
    finally:
        shutil.rmtree(models.cache_dir() / key, ignore_errors=True)
        (models.cache_dir() / ".locks" / f"{key}.lock").unlink(missing_ok=True)


def test_shipped_stan_files_are_formatted_as_stanc_prints(cmdstan, tmp_path):
    stanc = Path(cmdstan) / "bin" / "stanc"
    # stanc must resolve a template's slots to format it: one folder per family.
    for family, examples in SLOT_EXAMPLES.items():
        (tmp_path / "slots" / family).mkdir(parents=True)
        for slot, example in examples.items():
            shutil.copy(models.STAN_DIR / example, tmp_path / "slots" / family / slot)
    stan_files = models.STAN_DIR.rglob("*")
    shipped = [p for p in stan_files if p.suffix in models.templates.STAN_SUFFIXES]
    files = [*sorted(shipped), REPO_DIR / "tests" / "stan" / "idata_probe.stan"]
    assert files
    for path in files:
        source = path
        # a data-block fragment (lcvi_data.stan) is formatted inside a data block
        fragment = path.suffix == ".stan" and not PROGRAM_BLOCK.search(path.read_text())
        if fragment:
            source = tmp_path / f"wrapped-{path.name}"
            source.write_text("data {\n" + path.read_text() + "}\n")
        formatted = tmp_path / path.name
        include_paths = f"{tmp_path / 'slots' / path.parent.name},{path.parent}"
        subprocess.run(
            [
                str(stanc), "--auto-format", f"--include-paths={include_paths}",
                str(source), f"--o={formatted}",
            ],
            check=True,
            capture_output=True,
        )
        printed = formatted.read_text()
        if fragment:
            printed = "\n".join(printed.strip("\n").splitlines()[1:-1])
        # stanc ends a printed functions-only file without a final newline.
        assert printed.rstrip("\n") == path.read_text().rstrip("\n"), (
            f"{path} is not as stanc --auto-format prints it"
        )
