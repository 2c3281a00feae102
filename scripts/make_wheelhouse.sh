#!/usr/bin/env bash
# The offline classroom kit: download once every wheel the course needs into one folder, then install from that
# folder on machines without internet.
#
#   scripts/make_wheelhouse.sh [download] [DIR] [--torch-index URL] [--dry-run]    (on a machine with internet)
#   scripts/make_wheelhouse.sh install [DIR] [--extras LIST] [--dry-run]           (on each classroom machine)
#
# download (the default): into DIR (default: wheelhouse/ at the repository root)
#   1. torch, at the version constraints.txt pins (the lock that `make course` and `make test` install with);
#   2. the project's dependencies with every extra of pyproject.toml (course, dev, serve, site), resolved by pip from
#      the project itself under constraints.txt: the versions the test suite passed with, nothing listed twice;
#   3. the build backend of [build-system] requires, so that `pip install -e .` builds offline;
#   4. a wheel for any package that came only as a source archive, so no classroom machine has to build one.
# On a classroom machine, with the kit copied to wheelhouse/ at the repository root, `make course` installs from it
# without the network (scripts/bootstrap.py looks there first). In an environment of one's own instead:
# install: inside an activated venv (the Python the course will run), from the repository root:
#   pip install --no-index --find-links DIR -c constraints.txt <the torch pin>
#   pip install --no-index --find-links DIR -c constraints.txt -e ".[EXTRAS]"
#   and then `python -m specdec_lib doctor`. EXTRAS defaults to course,dev,serve: the notebooks, their tests and
#   the load test's server, what `make course` installs. --extras course is lighter (no pytest, nbval or
#   server), but the doctor then reports nbval missing.
#
# Options:
#   --torch-index URL  where torch comes from, as an extra index. On Linux, PyPI's torch is a CUDA build of several GB;
#                      the CPU build: --torch-index https://download.pytorch.org/whl/cpu. Default: pip's own
#                      configuration.
#   --extras LIST      install mode: the extras to install, comma-separated (default: course,dev,serve)
#   --dry-run          print the commands, run nothing
#   -h, --help         this text
#
# The wheels fit the machine that downloads them: the same operating system, CPU architecture and Python minor
# version as the classroom machines. Build one kit per platform. PYTHON (default python3) is the interpreter used.
# Exit status: 0 done, 1 a command failed, 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

mode=download dir=wheelhouse torch_index="" extras="" dry_run=0 dir_given=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dry-run) dry_run=1 ;;
        --torch-index) [ $# -ge 2 ] || { echo "make_wheelhouse.sh: --torch-index needs a URL" >&2; exit 2; }
                       torch_index="$2"; shift ;;
        --extras) [ $# -ge 2 ] || { echo "make_wheelhouse.sh: --extras needs a list, e.g. course,dev" >&2; exit 2; }
                  extras="$2"; shift ;;
        download|install) mode="$1" ;;
        -*) echo "make_wheelhouse.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) if [ "$dir_given" = 1 ]; then
               echo "make_wheelhouse.sh: one directory only, got '$dir' and '$1'" >&2; exit 2
           fi
           dir="$1"; dir_given=1 ;;
    esac
    shift
done

PYTHON="${PYTHON:-python3}"

# The torch pin of constraints.txt, e.g. torch==2.13.0.
torch_pin="$(grep -oE '^torch==[^[:space:]#]+' constraints.txt | head -n 1)"
if [ -z "$torch_pin" ]; then
    echo "make_wheelhouse.sh: no 'torch==...' line found in constraints.txt (make lock writes one)" >&2
    exit 1
fi

# The extras and the build requirements, read from pyproject.toml (tomllib from Python 3.11; a plain reading of
# the two tables before that).
read_pyproject() {
    "$PYTHON" - "$1" <<'EOF'
import re, sys
text = open("pyproject.toml", encoding="utf-8").read()
try:
    import tomllib
    data = tomllib.loads(text)
    extras = list(data["project"].get("optional-dependencies", {}))
    requires = data["build-system"]["requires"]
except ImportError:  # Python 3.10
    def table(name):
        match = re.search(r"^\[" + re.escape(name) + r"\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
        return match.group(1) if match else ""
    extras = re.findall(r"^([A-Za-z0-9_-]+)\s*=\s*\[", table("project.optional-dependencies"), re.M)
    requires = re.findall(r'"([^"]+)"', re.search(r"requires\s*=\s*\[(.*?)\]", table("build-system"), re.S).group(1))
print(",".join(extras) if sys.argv[1] == "extras" else "\n".join(requires))
EOF
}
all_extras="$(read_pyproject extras)"
extras="${extras:-course,dev,serve}"  # what `make course` installs; the other extras (the site's) are in the kit too

quote() {  # one argument as a reader would type it: bare when safe, else in single quotes
    if [[ "$1" =~ ^[A-Za-z0-9_./=:+,@%-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
run() {  # print a command, run it unless --dry-run
    printf '+'; for arg in "$@"; do printf ' %s' "$(quote "$arg")"; done; printf '\n'
    if [ "$dry_run" = 0 ]; then "$@"; fi
}

if [ "$mode" = install ]; then
    if [ "$dry_run" = 0 ] && ! ls "$dir"/torch-*.whl >/dev/null 2>&1; then
        echo "make_wheelhouse.sh: no torch wheel in $dir: build the kit first" \
             "(scripts/make_wheelhouse.sh download $dir)" >&2
        exit 1
    fi
    run "$PYTHON" -m pip install --no-index --find-links "$dir" -c constraints.txt "$torch_pin"
    run "$PYTHON" -m pip install --no-index --find-links "$dir" -c constraints.txt -e ".[$extras]"
    echo "Then check the machine: $PYTHON -m specdec_lib doctor"
    exit 0
fi

index_args=()
if [ -n "$torch_index" ]; then index_args=(--extra-index-url "$torch_index"); fi
run mkdir -p "$dir"
run "$PYTHON" -m pip download --dest "$dir" "${index_args[@]}" -c constraints.txt "$torch_pin"
run "$PYTHON" -m pip download --dest "$dir" --find-links "$dir" -c constraints.txt "$torch_pin" ".[$all_extras]"
mapfile -t build_requires < <(read_pyproject requires)
run "$PYTHON" -m pip download --dest "$dir" "${build_requires[@]}" wheel
if [ "$dry_run" = 1 ]; then
    echo "+ (then: a wheel for each source archive left in $dir, and the project's own archive removed)"
else
    rm -f "$dir"/specdec_lib-*  # the project itself is installed from the repository, not from the kit
    for archive in "$dir"/*.tar.gz "$dir"/*.zip; do
        [ -e "$archive" ] || continue
        run "$PYTHON" -m pip wheel --no-deps --wheel-dir "$dir" "$archive"
        rm -f "$archive"
    done
    if [ "$(uname -s)" = Linux ] && ! ls "$dir"/torch-*+cpu-*.whl >/dev/null 2>&1; then
        echo "make_wheelhouse.sh: note: the torch wheel in $dir is not a CPU build (several GB with its CUDA" \
             "libraries); for CPU classrooms use --torch-index https://download.pytorch.org/whl/cpu" >&2
    fi
    echo "$(ls "$dir" | wc -l) files, $(du -sh "$dir" | cut -f1) in $dir"
fi
echo "On each classroom machine: copy $dir to wheelhouse/ at the repository root, then run make course"
echo "(it installs from wheelhouse/ without the network). In an activated environment of your own instead:"
echo "  scripts/make_wheelhouse.sh install $dir"
