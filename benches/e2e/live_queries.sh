# Sourced by queries.sh and queries_instructions.sh: attach_live_queries ENDPOINT attaches the
# 4 live queries the benchmarks measure (two aggregations, a filter streaming rows, and a
# `SELECT *` whose client never reads) to the query service at ENDPOINT. Uses $bin and $work,
# and adds the clients to the pids array.
attach_live_queries() {
  local q=(--endpoint "$1" --for 10m)
  "$bin" query "${q[@]}" "SELECT resource.attributes['service.name'] AS svc, count(*) FROM logs GROUP BY svc" \
    > /dev/null 2>&1 & pids+=($!)
  "$bin" query "${q[@]}" "SELECT severity_text, count(*) FROM live.errors.logs GROUP BY 1" \
    > /dev/null 2>&1 & pids+=($!)
  "$bin" query "${q[@]}" --format csv "SELECT body FROM logs WHERE attributes['http.status_code'] >= 500" \
    > /dev/null 2>&1 & pids+=($!)
  # A client that stops reading: its output goes into a pipe nobody drains (fd 3 holds it
  # open; the caller closes it with `exec 3>&-`).
  mkfifo "$work/stalled"
  "$bin" query "${q[@]}" --follow "SELECT * FROM logs" > "$work/stalled" 2>/dev/null & pids+=($!)
  exec 3<>"$work/stalled"
}
