#!/usr/bin/env bash
# The first hour, as a new user spends it (issue 49's walk): a fresh clone, `make install`,
# `make run` (time to its ready line, the lines it prints), the README's three curls, /docs
# and /ui, the CLI's start (CPU of 5 runs each), `htm keys create` and `htm stats` beside the
# running service, MCP over HTTP with the official SDK (bench/first_hour_mcp.py), the agent
# loop (clients/mcp_agent_loop.py), a metrics scrape, and the stop. The machine's load is
# printed beside each figure: on a shared machine the wall times follow it.
#
#   bench/first_hour.sh [REPO] [SHARED]     (defaults: this repository, ../shared)
#
# Needs port 8000 free. Leaves the clone in the temporary directory it prints.
set -uo pipefail
repo=$(cd "${1:-$(dirname "$0")/..}" && pwd)
shared=$(cd "${2:-$repo/../shared}" 2>/dev/null && pwd || true)
d=$(mktemp -d)
git clone -q "$repo" "$d/p"
[ -n "$shared" ] && ln -s "$shared" "$d/shared"
cd "$d/p" || exit 1
load() { uptime | sed 's/.*load average: /load /'; }
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.1f}')"; }
echo "# first hour: $(git log --oneline -1 | cut -c1-60), clone in $d"

echo "## make install ($(load))"
/usr/bin/time -f '%e s wall, %U s user, %S s sys' make install >"$d/install.log" 2>&1
echo "- $(tail -1 "$d/install.log"); $(($(wc -l <"$d/install.log") - 1)) lines of output"

echo "## make run ($(load))"
t0=$(now)
script -q -f -c "make run" "$d/run.log" >/dev/null 2>&1 &
until grep -q "ready:" "$d/run.log" 2>/dev/null; do sleep 0.1; done
echo "- ready after $(since "$t0") s; $(($(wc -l <"$d/run.log") - 1)) lines until then:"
sed '1d' "$d/run.log" | sed 's/^/      /'

HTM=http://127.0.0.1:8000
echo "## the README's three requests ($(load))"
curl -s -o /dev/null -w '- add %{http_code} %{time_total}s\n' -X POST $HTM/v1/robots/alice/memories -H 'content-type: application/json' -d '{"content": "The staging database runs PostgreSQL 18 with pgvector.", "importance": 8, "tags": ["infra:database"]}'
curl -s -o /dev/null -w '- recall %{http_code} %{time_total}s\n' -X POST $HTM/v1/robots/alice/recall -H 'content-type: application/json' -d '{"query": "Which Postgres does staging run?", "limit": 5}'
curl -s -o /dev/null -w '- context %{http_code} %{time_total}s\n' "$HTM/v1/robots/alice/context?strategy=important&max_tokens=500"
for p in /docs /redoc /ui /openapi.json /favicon.ico /readyz; do
    curl -s -o /dev/null -w "- $p %{http_code}, %{size_download} B\n" $HTM$p
done

echo "## htm start-up, CPU (user+sys) of 5 runs each ($(load))"
for c in --version --help; do
    echo "- htm $c: $(for _ in 1 2 3 4 5; do /usr/bin/time -f '%U %S %e' .venv/bin/htm $c 2>&1 >/dev/null; done |
        awk '{printf "%.2f/%.2fs ", $1 + $2, $3}') (CPU/wall)"
done
echo "## beside the running service ($(load))"
echo "- htm keys create: $(for i in 1 2 3 4 5; do /usr/bin/time -f '%U %S %e' .venv/bin/htm keys create --namespace first-hour --role reader --name "k$i" 2>&1 >/dev/null | tail -1; done |
    awk '{printf "%.2f/%.2fs ", $1 + $2, $3}') (CPU/wall)"
echo "- htm stats: $( { /usr/bin/time -f '%U %S %e' .venv/bin/htm stats >"$d/stats.txt"; } 2>&1 | awk '{printf "%.2f/%.2fs", $1 + $2, $3}') (CPU/wall), $(wc -l <"$d/stats.txt") lines"

echo "## MCP over HTTP ($(load))"
# Counting tokens offline needs tiktoken's BPE file (the Makefile points at ../shared/tiktoken).
TIKTOKEN_CACHE_DIR=${TIKTOKEN_CACHE_DIR:-$d/shared/tiktoken} .venv/bin/python -m bench.first_hour_mcp $HTM
echo "## the agent loop, clients/mcp_agent_loop.py ($(load))"
/usr/bin/time -f '- %e s wall, %U s user, %S s sys' .venv/bin/python clients/mcp_agent_loop.py $HTM release-agent --namespace "first-hour-$$" 2>&1 | sed 's/^/      /'

echo "## a metrics scrape ($(load))"
curl -s $HTM/metrics >"$d/metrics.txt"
echo "- $(wc -c <"$d/metrics.txt") B, $(grep -vc '^#' "$d/metrics.txt") samples, $(grep -c '_bucket{' "$d/metrics.txt") of them buckets, route=\"unmatched\" $(grep -c 'route="unmatched"' "$d/metrics.txt") series"

echo "## stop ($(load))"
before=$(wc -l <"$d/run.log")
for pid in $(pgrep -f "htm serve$"); do  # this clone's service: the one running in it
    [ "$(readlink "/proc/$pid/cwd")" = "$d/p" ] && kill -INT "$pid"
done
wait
echo "- $(($(wc -l <"$d/run.log") - before - 2)) lines on stop"
