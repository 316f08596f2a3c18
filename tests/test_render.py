"""Template rendering (#include, slots) and the model cache key; no compiler needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from stanflow import models
from stanflow.models import TemplateError, cache_key, render
from stanflow.models.cache import CACHE_FORMAT

TEMPLATE = """\
functions {
  #include loss.stanfunctions
}
parameters {
  real theta;
}
model {
  target += -loss(theta);
}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_flattens_nested_includes_in_order(tmp_path):
    write(
        tmp_path / "lib" / "inner.stanfunctions",
        "real inner(real x) {\n  return x;\n}\n",
    )
    write(
        tmp_path / "lib" / "outer.stanfunctions",
        "#include inner.stanfunctions\nreal outer() {\n  return 1;\n}\n",
    )
    main = write(
        tmp_path / "main.stan",
        "functions {\n#include lib/outer.stanfunctions\n}\nmodel {\n}\n",
    )

    assert render(main) == (
        "functions {\n"
        "real inner(real x) {\n  return x;\n}\n"
        "real outer() {\n  return 1;\n}\n"
        "}\nmodel {\n}\n"
    )


@pytest.mark.parametrize(
    "line",
    [
        "#include f.stanfunctions",
        '  #include "f.stanfunctions"',
        "\t#include <f.stanfunctions>",
        "#include f.stanfunctions  // the helper",
    ],
)
def test_include_forms(tmp_path, line):
    write(tmp_path / "f.stanfunctions", "real f() {\n  return 1;\n}")
    main = write(tmp_path / "main.stan", f"functions {{\n{line}\n}}\n")

    assert render(main) == "functions {\nreal f() {\n  return 1;\n}\n}\n"


def test_commented_includes_are_left_alone(tmp_path):
    text = (
        "// #include missing1.stan\n"
        "/* a comment\n"
        "#include missing2.stan\n"
        "*/\n"
        'model {\n  print("/*");\n}\n'
        "/* one-line */\n"
    )
    main = write(tmp_path / "main.stan", text)

    assert render(main) == text


def test_include_after_block_comment_on_same_line_closing_is_resolved(tmp_path):
    write(tmp_path / "f.stanfunctions", "// f")
    main = write(tmp_path / "main.stan", "/* start\nend */\n#include f.stanfunctions\n")

    assert render(main) == "/* start\nend */\n// f\n"


def test_search_order_local_then_include_paths_then_stan_dir(tmp_path, monkeypatch):
    stan_dir = tmp_path / "stan"
    extra = tmp_path / "extra"
    for folder in (stan_dir, extra, tmp_path / "t"):
        write(folder / "a.stanfunctions", f"// a from {folder.name}")
    write(stan_dir / "b.stanfunctions", "// b from stan")
    write(extra / "b.stanfunctions", "// b from extra")
    write(stan_dir / "c.stanfunctions", "// c from stan")
    main = write(
        tmp_path / "t" / "main.stan",
        "".join(f"#include {n}.stanfunctions\n" for n in "abc"),
    )
    monkeypatch.setattr(models.templates, "STAN_DIR", stan_dir)

    assert render(main, include_paths=[extra]) == (
        "// a from t\n// b from extra\n// c from stan\n"
    )


def test_slot_is_bound_to_a_file(tmp_path):
    loss = write(
        tmp_path / "losses" / "absolute.stanfunctions",
        "real loss(real t) {\n  return abs(t);\n}\n",
    )
    template = write(tmp_path / "gibbs.stan", TEMPLATE)

    rendered = render(template, slots={"loss.stanfunctions": loss})

    assert "  #include" not in rendered
    assert rendered.startswith(
        "functions {\nreal loss(real t) {\n  return abs(t);\n}\n}\n"
    )


def test_slot_binding_overrides_a_file_of_the_same_name(tmp_path):
    write(tmp_path / "loss.stanfunctions", "// default loss")
    chosen = write(tmp_path / "other" / "mine.stanfunctions", "// my loss")
    template = write(tmp_path / "gibbs.stan", "#include loss.stanfunctions\n")

    assert render(template) == "// default loss\n"
    assert render(template, slots={"loss.stanfunctions": chosen}) == "// my loss\n"


def test_slot_file_includes_are_searched_from_its_own_folder(tmp_path):
    write(tmp_path / "user" / "helper.stanfunctions", "// helper")
    loss = write(
        tmp_path / "user" / "loss.stanfunctions",
        "#include helper.stanfunctions\n// loss",
    )
    template = write(
        tmp_path / "templates" / "gibbs.stan", "#include loss.stanfunctions\n"
    )

    assert (
        render(template, slots={"loss.stanfunctions": loss}) == "// helper\n// loss\n"
    )


def test_unbound_slot_error_names_file_line_and_how_to_bind(tmp_path):
    template = write(tmp_path / "gibbs.stan", TEMPLATE)

    with pytest.raises(TemplateError) as err:
        render(template)

    message = str(err.value)
    assert f"{template}, line 2" in message
    assert "loss.stanfunctions" in message
    assert "slots=" in message


def test_missing_include_in_nested_file_names_that_file(tmp_path):
    inner = write(
        tmp_path / "inner.stanfunctions",
        "// ok\n// ok\n#include nowhere.stanfunctions\n",
    )
    main = write(tmp_path / "main.stan", "#include inner.stanfunctions\n")

    with pytest.raises(
        TemplateError, match=rf"{inner}, line 3: cannot resolve #include nowhere"
    ):
        render(main)


def test_unused_slot_is_an_error(tmp_path):
    loss = write(tmp_path / "l.stanfunctions", "// l")
    template = write(tmp_path / "gibbs.stan", "#include loss.stanfunctions\n")

    with pytest.raises(
        TemplateError, match=r"slots \['los\.stanfunctions'\] are not included"
    ):
        render(template, slots={"los.stanfunctions": loss, "loss.stanfunctions": loss})


def test_slot_target_must_exist(tmp_path):
    template = write(tmp_path / "gibbs.stan", TEMPLATE)

    with pytest.raises(
        TemplateError, match=r"slots\['loss.stanfunctions'\]: file not found"
    ):
        render(template, slots={"loss.stanfunctions": tmp_path / "nope.stanfunctions"})


def test_cycle_is_an_error_naming_the_chain(tmp_path):
    a = write(tmp_path / "a.stanfunctions", "#include b.stanfunctions\n")
    b = write(tmp_path / "b.stanfunctions", "// b\n#include a.stanfunctions\n")
    main = write(tmp_path / "main.stan", "#include a.stanfunctions\n")

    with pytest.raises(TemplateError) as err:
        render(main)

    message = str(err.value)
    assert f"{b}, line 2" in message
    assert "cycle" in message
    assert f"{a} -> {b} -> {a}" in message


def test_self_include_is_a_cycle(tmp_path):
    main = write(tmp_path / "main.stan", "#include main.stan\n")

    with pytest.raises(TemplateError, match="cycle"):
        render(main)


def test_same_file_twice_without_cycle_is_included_twice(tmp_path):
    # Stan semantics: an #include is textual; stanc would report duplicate functions.
    write(tmp_path / "f.stanfunctions", "// f")
    write(tmp_path / "g.stanfunctions", "#include f.stanfunctions")
    main = write(
        tmp_path / "main.stan", "#include f.stanfunctions\n#include g.stanfunctions\n"
    )

    assert render(main) == "// f\n// f\n"


def test_missing_template_and_bad_include_paths(tmp_path):
    with pytest.raises(TemplateError, match=r"path: file not found: .*absent\.stan"):
        render(tmp_path / "absent.stan")
    main = write(tmp_path / "main.stan", "model {\n}\n")
    with pytest.raises(TemplateError, match=r"include_paths: .* is not a folder"):
        render(main, include_paths=[tmp_path / "nofolder"])
    with pytest.raises(TemplateError, match="sequence of folders"):
        render(main, include_paths=str(tmp_path))


# For each folder of shipped templates, a shipped file for every slot they declare.
SLOT_EXAMPLES = {
    "gibbs": {
        "loss.stanfunctions": "losses/absolute.stanfunctions",
        "prior.stanfunctions": "priors/uniform.stanfunctions",
    },
    "qpaths": {
        "base.stanfunctions": "qpaths/gaussian_base.stanfunctions",
        "target.stanfunctions": "qpaths/gaussian_target.stanfunctions",
    },
    "lcvi": {"loss.stanfunctions": "losses/squared.stanfunctions"},
    "losses": {"loss.stanfunctions": "losses/absolute.stanfunctions"},
    "wbb": {
        "loss.stanfunctions": "losses/squared.stanfunctions",
        "penalty.stanfunctions": "wbb/penalties/ridge.stanfunctions",
    },
}


def test_shipped_programs_render_to_themselves():
    for name in models.list_programs():
        path = models.program_path(name)
        text = path.read_text()
        if "#include" not in text:
            assert render(path) == text, name
            continue
        # A template: with its slots bound, every include is replaced by a file.
        examples = SLOT_EXAMPLES[path.parent.name]
        slots = {
            slot: models.STAN_DIR / example
            for slot, example in examples.items()
            if slot in text or path.parent.name == "lcvi"  # lcvi's is nested
        }
        rendered = render(path, slots=slots)
        assert "#include" not in rendered, name
        for slot in slots.values():
            assert slot.read_text().strip() in rendered, (name, slot)


def test_program_path_and_list_programs():
    assert "models/eight_schools_noncentered" in models.list_programs()
    assert "models/eight_schools_centered" in models.list_programs()
    path = models.program_path("models/eight_schools_noncentered")
    assert path == models.STAN_DIR / "models" / "eight_schools_noncentered.stan"
    assert models.program_path("models/eight_schools_noncentered.stan") == path
    with pytest.raises(ValueError, match="models/eight_schools_centered"):
        models.program_path("models/eight_school")


KEY_ARGS = {
    "name": "m",
    "toolchain": {"path": "/opt/cmdstan", "version": "2.35.0"},
    "cpp_options": {"STAN_THREADS": True},
    "stanc_options": {},
}


def test_cache_key_is_stable():
    key = cache_key("model {\n}\n", **KEY_ARGS)

    assert key == cache_key("model {\n}\n", **KEY_ARGS)
    assert len(key) == 32 and int(key, 16) >= 0
    # Pinned: a change of the key's recipe orphans every cached model, so it goes
    # with a new CACHE_FORMAT (format 2: entries record and check their files).
    assert CACHE_FORMAT == 2
    assert key == "c55188058a1ab39c33ba81dc67912348"


def test_cache_key_ignores_flag_order():
    a = cache_key(
        "x",
        **{
            **KEY_ARGS,
            "cpp_options": {"A": 1, "B": 2},
            "stanc_options": {"O1": True, "warn-pedantic": True},
        },
    )
    b = cache_key(
        "x",
        **{
            **KEY_ARGS,
            "cpp_options": {"B": 2, "A": 1},
            "stanc_options": {"warn-pedantic": True, "O1": True},
        },
    )
    assert a == b


@pytest.mark.parametrize(
    "change",
    [
        {"name": "m2"},
        {"toolchain": {"path": "/other/cmdstan", "version": "2.35.0"}},
        {"toolchain": {"path": "/opt/cmdstan", "version": "2.36.0"}},
        {"cpp_options": {}},
        {"cpp_options": {"STAN_THREADS": True, "STAN_NO_RANGE_CHECKS": True}},
        {"stanc_options": {"O1": True}},
    ],
)
def test_cache_key_changes_with_every_input(change):
    assert cache_key("model {\n}\n", **{**KEY_ARGS, **change}) != cache_key(
        "model {\n}\n", **KEY_ARGS
    )


def test_cache_key_changes_with_code_and_with_a_slot(tmp_path):
    write(tmp_path / "a.stanfunctions", "real loss(real t) {\n  return abs(t);\n}\n")
    write(tmp_path / "b.stanfunctions", "real loss(real t) {\n  return square(t);\n}\n")
    template = write(tmp_path / "gibbs.stan", TEMPLATE)
    keys = {
        cache_key(
            render(template, slots={"loss.stanfunctions": tmp_path / f}), **KEY_ARGS
        )
        for f in ("a.stanfunctions", "b.stanfunctions")
    }
    assert len(keys) == 2
    assert cache_key("model {\n}\n", **KEY_ARGS) != cache_key(
        "model {\n}\n\n", **KEY_ARGS
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "8schools"}, "name must start with a letter"),
        ({"name": "a-b"}, "name must start with a letter"),
        ({"cpp_options": {1: True}}, "cpp_options: keys must be non-empty strings"),
        ({"stanc_options": {"include-paths": ["x"]}}, "pass include_paths= instead"),
    ],
)
def test_compile_model_validates_arguments_before_compiling(kwargs, message):
    source = models.program_path("models/eight_schools_noncentered")
    with pytest.raises(ValueError, match=message):
        models.compile_model(source, **kwargs)


def test_compile_model_reports_template_errors_before_compiling(tmp_path):
    template = write(tmp_path / "gibbs.stan", TEMPLATE)
    with pytest.raises(TemplateError, match=r"loss\.stanfunctions"):
        models.compile_model(template)
