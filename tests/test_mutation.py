"""Mutation testing of the pure core (scripts/mutation.py) as a test: every mutant of the
five safety modules is killed by their tests or listed as equivalent with a reason; the
other core modules run in the slow suite. See docs/conventions.md, "Answering a survivor"."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mutation.py"
SAFETY = (
    "watermark/core/window.py",
    "l0gc/contract/safe_epoch.py",
    "gcd/rules/decision.py",
    "gcd/rules/cursor.py",
    "watermark/core/fencelock.py",
)


def tool() -> ModuleType:
    """scripts/mutation.py, imported (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("l0gc_mutation", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The tool as `make mutation` runs it."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.timeout(900)
def test_the_safety_modules_have_no_unlisted_survivor() -> None:
    """window, safe_epoch, decision, cursor and fencelock: every mutant run, each killed
    or listed as equivalent (none left open)."""
    done = run("--safety", timeout=850)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")]
    by_module = {row[0].removeprefix("| "): row for row in rows[1:] if "/" in row[0]}
    assert sorted(by_module) == sorted(SAFETY)
    for row in by_module.values():
        assert row[1] == row[2], f"every mutant runs, none sampled out: {row}"
        assert (row[5], row[6], row[7]) == ("0", "0", "100 %"), row


@pytest.mark.deep
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_other_core_modules_have_no_new_survivor() -> None:
    """layout, gcindex, assignment, binding, strictjson, undo, 25 mutants each (a fixed seed):
    every one killed, listed as equivalent, or one of the survivors still open."""
    done = run("--rest", "--sample", "25", "--seed", "31", timeout=1700)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_survivor_that_is_not_listed_fails_the_run(tmp_path: Path) -> None:
    """Without its line in the equivalents file a known equivalent is a new survivor: the
    run fails and names it."""
    empty = tmp_path / "equivalents.txt"
    empty.write_text("# nothing listed\n", encoding="utf-8")
    mutant = "gcd/rules/cursor.py:skip:const:1->0#1"
    done = run("gcd/rules/cursor.py", "--match", mutant, "--equivalents", str(empty), timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"  {mutant}\n      line " in done.stdout
    # every mutant of the module counted, one run, none killed, one unlisted survivor
    assert re.search(
        r"\| gcd/rules/cursor\.py \| [0-9]+ \| 1 \| 0 \(0 timed out\) \| 0 \| 0 "
        r"\| 1 \| 0 % \|",
        done.stdout,
    ), done.stdout


def test_mutant_ids_survive_unrelated_edits() -> None:
    """An id names the function, the change and its occurrence there, not a line: code
    added above, or in another function, leaves the ids of `f` as they were."""
    mutation = tool()
    source = "def f(x):\n    return x + 1 > 2 and x < 9\n"
    edited = (
        "import math\n\n\ndef g(y):\n    return y + 1 > 2\n\n\n"
        + source
        + "\n\ndef h():\n    return 1 - 1\n"
    )
    module = ModuleType("m")
    before = {m.id for m in mutation.mutants("m.py", source, module)}
    after = {m.id for m in mutation.mutants("m.py", edited, module) if ":f:" in m.id}
    assert before == after
    assert "m.py:f:cmp:>->>=#1" in before
    assert "m.py:f:const:1->2#1" in before


def test_docstrings_asserts_and_annotations_are_not_mutated() -> None:
    """Only behaviour is mutated: no mutant on a docstring, an assert or an annotation."""
    mutation = tool()
    source = (
        '"""Doc."""\n\n\ndef f(x: int = 1) -> bool:\n    """Doc 2."""\n'
        "    assert x > 0\n    return x > 1\n"
    )
    found = {(m.line, m.id) for m in mutation.mutants("m.py", source, ModuleType("m"))}
    assert {line for line, _ in found} == {4, 7}
    assert (4, "m.py:<module>:const:1->2#1") in found  # the default, where the def runs


def test_every_listed_mutant_exists_and_has_a_reason() -> None:
    """The equivalents and open files parse, each id is a mutant the tool makes today,
    and no safety module has a survivor left open."""
    mutation = tool()
    listed = mutation.read_equivalents() | mutation.read_equivalents(mutation.OPEN)
    assert listed
    for path in sorted({mutant_id.split(":", 1)[0] for mutant_id in listed}):
        source = (ROOT / path).read_text(encoding="utf-8")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        ids = {m.id for m in mutation.mutants(path, source, module)}
        missing = {i for i in listed if i.startswith(f"{path}:")} - ids
        assert missing == set(), f"listed but not made: {missing}"
    assert all(len(reason.split()) >= 4 for reason in listed.values())
    open_ones = mutation.read_equivalents(mutation.OPEN)
    assert [i for i in open_ones if i.split(":", 1)[0] in SAFETY] == []


def test_a_mutant_runs_only_the_tests_that_called_its_function() -> None:
    """Coverage selection: a mutant of `f` gets the tests that entered `f` or a function
    nested in it (not `f2`, whose name only starts alike), in their order; a mutant
    outside any function gets every test."""
    mutation = tool()
    source = "def f(x):\n    return x + 1\n\n\ndef f2(x):\n    return x - 1\n"
    by_id = {m.id: m for m in mutation.mutants("m.py", source, ModuleType("m"))}
    in_f, in_f2 = by_id["m.py:f:binop:+->-#1"], by_id["m.py:f2:binop:-->+#1"]
    items = ["calls f", "calls f2", "calls a closure of f", "calls nothing", "calls both"]
    covered = [
        frozenset({"f"}),
        frozenset({"f2"}),
        frozenset({"f.<locals>.g"}),
        frozenset(),
        frozenset({"f", "f2"}),
    ]
    assert mutation._covering(in_f, items, covered) == [
        "calls f",
        "calls a closure of f",
        "calls both",
    ]
    assert mutation._covering(in_f2, items, covered) == ["calls f2", "calls both"]
    outside = mutation.Mutant(
        "m.py", "m.py:<module>:const:1->2#1", 1, "<module>", None, 0, edit=lambda nodes, at: None
    )
    assert mutation._covering(outside, items, covered) == items
    assert mutation._covering(in_f, items, None) == items  # no coverage: a sample


HARMLESS = "EpochWindow.__repr__:cmp:==->!=#1"  # how a window prints; nothing decides on it


@pytest.mark.timeout(600)
def test_the_exhaustive_checker_as_a_killer_names_the_mutants_only_it_kills() -> None:
    """`--explore-killer`: the window-floor mutant of issue 40 (`epoch <= floor` to
    `epoch < floor`), handed over as if the unit tests had let it live, is killed by the
    exhaustive search in `EXPLORE_SCOPE` and reported as killed only by it; a mutant
    that only changes how a window prints (HARMLESS) is not killed."""
    mutation = tool()
    path = "watermark/core/window.py"
    source = (ROOT / path).read_text(encoding="utf-8")
    module = importlib.import_module("watermark.core.window")
    found = {m.id: m for m in mutation.mutants(path, source, module)}
    floor = found[f"{path}:EpochWindow.classify:cmp:<=-><#1"]
    harmless = found[f"{path}:{HARMLESS}"]
    tested = mutation.Result(path, run=[floor, harmless], survived=[floor, harmless])
    out = io.StringIO()
    campaign = mutation._Campaign([path], 2, None, 31, None, 5.0, {}, {}, False, out, "all")
    campaign._explore(tested, ast.parse(source), source.splitlines())
    said = out.getvalue()
    assert "killed only by the exhaustive checker" in said
    assert f"  {floor.id}\n" in said
    assert harmless.id not in said
    assert re.match(
        rf"\| {re.escape(path)} \| all \| 2 \| 1 \(0 timed out\) \| 0 \| 1 \|", campaign.explored[0]
    ), campaign.explored
