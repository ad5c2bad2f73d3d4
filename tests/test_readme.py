"""The README's commands stay true: every entry point it shows exists, and accepts every flag it shows."""

import functools
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bash_commands(page: str) -> list[str]:
    """The `python ...` lines of a page's ```bash blocks (a trailing backslash's continuation joined, a comment
    dropped)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("python ") and not line.startswith("python3 -m venv"):
                commands.append(line.split("#")[0].strip())
    return commands


def entry_point(command: str) -> list[str]:
    words = command.split()
    return words[1:3] if words[1] == "-m" else words[1:2]


COMMANDS = bash_commands("README.md")


def test_readme_shows_the_whole_tour():
    shown = {" ".join(entry_point(c)) for c in COMMANDS}
    assert {"pretraining/train.py", "finetune/kfold.py", "-m serving.export", "-m serving.score", "-m app",
            "-m pytest"} <= shown


@functools.cache
def help_of(target: tuple[str, ...]) -> str:
    """An entry point's --help (asked once per run: the README and every docs page share the answers)."""
    proc = subprocess.run([sys.executable, *target, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def subcommand(command: str) -> list[str]:
    """The words between the entry point and the first option: `users add ana` in `python -m app users add ana
    --role annotator`, whose --help is where `--role` is listed."""
    words = command.split()[1 + len(entry_point(command)):]
    return list(itertools.takewhile(lambda w: not w.startswith("-"), words))


def assert_flags_exist(command: str) -> None:
    """Every flag shown is in the entry point's --help or, for a subcommand, in the subcommand's (which must exist:
    its --help exits 0)."""
    target = tuple(entry_point(command))
    shown = help_of(target)
    if sub := subcommand(command):
        shown += help_of((*target, *sub))
    for flag in re.findall(r"(?<=\s)--[a-z][a-z0-9-]*", command):
        assert flag in shown, f"{' '.join((*target, *sub))} has no {flag}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if "pytest" not in c], ids=lambda c: " ".join(c.split()[:3]))
def test_readme_command_flags_exist(command):
    assert_flags_exist(command)


def test_ci_runs_the_readme_test_command():
    """What CI runs is what a user is told to run: the suite two files at a time (issue 45: under 15 minutes)."""
    (command,) = [c for c in COMMANDS if entry_point(c) == ["-m", "pytest"]]
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "-n 2 --dist loadgroup" in command  # tests/conftest.py's scheduler: a file's tests on one worker


def test_readme_fits_one_page():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# Guides (issue 60): one task a page, read in one sitting; held to the docs pages' rules, and to their own below.
GUIDES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "guides").glob("*.md"))
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")) + GUIDES
# The measurements themselves, not pages a user comes to with a task: today's figures, one table per claim.
MEASUREMENTS = {"docs/results.md"}
# The research log (issue 60): dated findings, superseded designs, negative results; no guide depends on it.
NOTES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "notes").glob("*.md"))
RESULTS_WORDS, NOTES_WORDS = 4000, 6000


@pytest.mark.parametrize("page", ["README.md", *DOCS, *NOTES])
def test_links_reach_a_file_and_heading(page):
    source = ROOT / page
    for target in re.findall(r"\]\(([^)\s]+)\)", source.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        assert linked.exists(), f"{page} links to {target}: no such file"
        if anchor and linked.suffix == ".md":
            text = linked.read_text(encoding="utf-8")
            headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
            anchors = {github_anchor(h) for h in headings} | set(re.findall(r'<a id="([^"]+)"></a>', text))
            assert anchor in anchors, f"{page} links to {target}: no such heading"


@pytest.mark.parametrize("page", [p for p in DOCS if p not in MEASUREMENTS])
def test_docs_pages_open_with_what_a_user_comes_for(page):
    """Issue 45 (16): a page opens with the tasks a user comes for, before the internals."""
    opening = (ROOT / page).read_text(encoding="utf-8").split("\n### ")[0]
    assert "What you come for" in opening, f"{page} does not open with the tasks a user comes for"
    assert len(re.findall(r"^- \*\*", opening, flags=re.MULTILINE)) >= 3, f"{page}: fewer than 3 tasks up front"


OPENING_LINES = 45  # a docs page's first screen or two: where its tasks and their commands are


def opening_commands(page: str) -> list[str]:
    """The commands a page's opening shows: `python ...` spans in its text, and the lines of a ```bash block that
    starts there (a line's comment and a trailing backslash's continuation dropped)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    head = "\n".join(text.splitlines()[:OPENING_LINES])
    commands = re.findall(r"`((?:python|docker|kubectl) [^`]+)`", re.sub(r"\n\s+", " ", head))
    for block in re.finditer(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        if block.start() < len(head):
            commands += [line.split(" #")[0].strip() for line in block.group(1).replace("\\\n", " ").splitlines()]
    return [c for c in commands if c and not c.startswith(("#", "export "))]


@pytest.mark.parametrize("page", [p for p in DOCS if p not in MEASUREMENTS])
def test_docs_openings_show_commands_that_work(page):
    """Issue 45 (16): the opening shows commands a user copies, a few lines a task, and each is true: its entry
    point takes every flag shown, and the files it names are in the project."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    assert any("What you come for" in line for line in lines[:15]), f"{page}: the tasks come after line 15"
    tasks = "\n".join(lines[:OPENING_LINES]).split("What you come for")[1].split("\n\n")[1]
    for task in re.split(r"\n(?=- )", tasks):
        assert len(task.splitlines()) <= 4, f"{page}: a task over 4 lines: {task[:80]!r}"
    commands = opening_commands(page)
    assert any(" --" in c or " -f " in c for c in commands), f"{page}: no command with its options up front"
    for command in commands:
        if command.startswith("python "):
            assert_flags_exist(command)
        for named in re.findall(r"\s-(?:f|k)\s+(\S+)", command):
            assert (ROOT / named).exists(), f"{page}: {command!r} names {named}, not in the project"


GUIDE_WORDS = 2500  # issue 60: a guide is read in one sitting


def test_the_guides_are_there():
    assert {"docs/guides/label-as-a-team.md", "docs/guides/replace-an-llm-call.md",
            "docs/guides/answers-you-can-trust.md", "docs/guides/serve-and-scale.md",
            "docs/guides/pretrain-and-fine-tune.md"} <= set(GUIDES)


@pytest.mark.parametrize("page", GUIDES)
def test_a_guide_is_read_in_one_sitting(page):
    words = len((ROOT / page).read_text(encoding="utf-8").split())
    assert words <= GUIDE_WORDS, f"{page}: {words} words, over {GUIDE_WORDS}"


@pytest.mark.parametrize("command", [(page, c) for page in GUIDES for c in bash_commands(page)],
                         ids=lambda pc: f"{Path(pc[0]).stem}: {' '.join(pc[1].split()[:4])}")
def test_guide_commands_exist_with_their_flags(command):
    """Every `python ...` line of a guide's ```bash blocks, not only its opening: a guide is the commands a person
    copies, so each entry point (and subcommand) must exist and take every flag shown."""
    _, line = command
    assert_flags_exist(line)


# The credential each guide's curl lines send, by the role of who holds it (docs/guides/label-as-a-team.md names them)
TOKEN_ROLES = {"$ANA": "annotator", "$RUI": "reviewer", "$KEY": "admin"}


def curl_calls(page: str) -> list[tuple[str, str, str | None]]:
    """(method, path, the token variable sent or None) of each `curl` line in a page's ```bash blocks."""
    text = (ROOT / page).read_text(encoding="utf-8")
    calls = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip().startswith("curl "):
                continue
            method = re.search(r"-X (\w+)", line)
            (path,) = re.findall(r"localhost:8000(/[^\s\"'?]*)", line)
            token = re.search(r"Bearer (\$\w+)", line)
            calls.append((method.group(1) if method else "POST" if " -d " in line else "GET", path,
                          token and token.group(1)))
    return calls


@pytest.mark.parametrize("page", GUIDES)
def test_guide_calls_name_routes_their_caller_may_use(page):
    """A guide's curl reaches a route the app serves (app/team/roles.py ROUTES: the app refuses to start with a
    route missing there), with a token whose role that route allows."""
    from app.team import roles

    table = roles.RouteTable()
    for method, path, token in curl_calls(page):
        rule = table.rule(method, path)
        assert rule is not None, f"{page}: {method} {path}: no such route"
        if token:
            assert token in TOKEN_ROLES, f"{page}: {method} {path} sends {token}, whose role the guide does not say"
            assert rule.allows(TOKEN_ROLES[token]), f"{page}: {method} {path} needs {rule.role}, not {token}"


def test_results_and_the_log_stay_short():
    """Issue 60: results.md holds today's figures only, the log what a reader still needs; git keeps the rest."""
    words = len((ROOT / "docs" / "results.md").read_text(encoding="utf-8").split())
    assert words <= RESULTS_WORDS, f"docs/results.md: {words} words, over {RESULTS_WORDS}"
    assert NOTES, "docs/notes/ holds the research log"
    for page in NOTES:
        words = len((ROOT / page).read_text(encoding="utf-8").split())
        assert words <= NOTES_WORDS, f"{page}: {words} words, over {NOTES_WORDS}"


@pytest.mark.parametrize("page", ["README.md", *GUIDES])
def test_no_guide_depends_on_the_research_log(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert not re.findall(r"\]\([^)]*notes/[^)]*\)", text), f"{page} links to docs/notes/: cite results.md instead"


def test_every_results_section_is_dated():
    """Each claim's table says when it was measured (a row, or its section's lead, carries the date)."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for section in text.split("\n### ")[1:]:
        assert re.search(r"20\d\d-\d\d-\d\d", section), f"results.md: {section.splitlines()[0]!r} has no date"


@pytest.mark.parametrize("page", ["README.md", *GUIDES])
def test_figures_quoted_with_results_have_their_row(page):
    """A paragraph that cites results.md quotes only figures that results.md holds (decimals and thousands: the
    numbers a reader would check), so a figure cannot outlive its row."""
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    text = (ROOT / page).read_text(encoding="utf-8")
    for paragraph in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", text, flags=re.DOTALL)):
        if "results.md" not in paragraph:
            continue
        prose = re.sub(r"\]\([^)]*\)", "]", paragraph)
        for figure in re.findall(r"(?<![\w.])(\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+)(?!\d)", prose):
            assert figure in results, f"{page} quotes {figure} beside a results.md link; results.md has no such row"
