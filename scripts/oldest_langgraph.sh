#!/usr/bin/env bash
# Run spanpoint's graph tests against one langgraph version (default: the lowest that
# pyproject.toml allows) in a throwaway virtualenv, beside the newest one in .venv.
#
#   bash scripts/oldest_langgraph.sh [VERSION] [pytest args...]
#
# The virtualenv lives under ${SPANPOINT_CACHE:-~/.cache/spanpoint}/langgraph-VERSION and is
# reused; spanpoint itself comes from src/ (PYTHONPATH), never installed there.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FLOOR="$(sed -n 's/^ *"langgraph>=\([0-9.]*\)",.*/\1/p' "$ROOT/pyproject.toml" | head -1)"
VERSION="${1:-$FLOOR}"
[ $# -gt 0 ] && shift
CACHE="${SPANPOINT_CACHE:-$HOME/.cache/spanpoint}"
VENV="$CACHE/langgraph-$VERSION"
PY="${PYTHON:-python3.11}"
if [ ! -f "$VENV/.installed" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # spanpoint's dependencies with langgraph pinned; pip picks what fits beside it.
  deps="$("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
runtime = [d for d in project["dependencies"] if not d.startswith("langgraph>")]
# The test tools and the real upstream agents tests/graph builds (not the linters, dashboards).
wanted = ("pytest", "hypothesis", "deepagents", "langgraph-supervisor", "langgraph-swarm")
dev = [d for d in project["optional-dependencies"]["dev"] if d.startswith(wanted)]
print("\n".join(runtime + dev))
PYEOF
)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q "langgraph==$VERSION" $deps aiosqlite
  touch "$VENV/.installed"
fi
echo "langgraph $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("langgraph"))')" >&2
cd "$ROOT"
# Extra arguments go to pytest (more paths, -x, -k …).
PYTHONPATH="$ROOT/src" exec "$VENV/bin/python" -m pytest tests/graph -q -p no:cacheprovider "$@"
