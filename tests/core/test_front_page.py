"""The front page tells the story: short, its two set-up commands first, every link it makes resolves, and the
project speaks of itself, not of how it was written."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_is_short_and_starts_with_the_two_commands():
    assert len(README.splitlines()) <= 210
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith('pip install torch==2.13.0 && pip install -e ".[all]" && arldiag detect sample_runs/')
    assert block[1] == 'pip install torch==2.13.0 && pip install -e ".[all,test]" && python -m pytest'


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_no_word_about_how_it_was_written():
    pages = [ROOT / "README.md", ROOT / "sample_runs" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for p in pages:
        hits = [ln for ln in p.read_text().splitlines() if re.search(r"\bsessions?\b", ln, re.I)]
        assert not hits, (p.name, hits[:2])
