"""Render the fleet report (HTML and Markdown) from ``model.build`` output with jinja2."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from gpunode.report.model import build, load_inputs

TEMPLATES = Path(__file__).parent / "templates"


def value_text(value) -> str:
    """A contract value as an operator reads it: strings bare, ``None`` as ``-``, the rest as JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def cell_text(cell: dict | None) -> str:
    """One host × setting cell: the value, or ``r<rail>=<value>`` per rail when the rails differ;
    ``missing`` when the host does not publish the setting."""
    if not cell:
        return ""
    if cell.get("missing"):
        return "missing"
    if cell.get("value") is not None or not cell.get("rails"):
        return value_text(cell.get("value"))
    return ", ".join(f"r{rail}={value_text(v)}" for rail, v in sorted(cell["rails"].items()))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["value_text"] = value_text
    env.filters["cell_text"] = cell_text
    env.filters["md"] = lambda text: str(text).replace("|", "\\|")
    return env


def render(report: dict) -> dict[str, str]:
    """``{"report.html": text, "report.md": text}`` for a built report."""
    env = _environment()
    return {name: env.get_template(f"{name}.j2").render(**report) for name in ("report.html", "report.md")}


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def write_report(input_dir: Path, output_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Load ``input_dir``, render, write ``report.html``, ``report.md`` and ``report.json`` (the
    built model) into ``output_dir``. A file whose content is unchanged is not rewritten.
    Returns ``{name: (path, written)}``."""
    report = build(load_inputs(Path(input_dir)))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    texts = render(report)
    texts["report.json"] = json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"
    return {name: (output_dir / name, _write_if_changed(output_dir / name, text)) for name, text in texts.items()}
