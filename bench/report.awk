# bench/run.sh's report: reads info.tsv (key, value), runs.tsv (series, unit, ok|err, value or
# message) and rows.tsv (figure, unit, softib series, peer label, peer series, target kind,
# target value); prints the table, writes -v json=FILE and the same table as Markdown to -v md=FILE.
# POSIX awk (mawk): no gawk extensions.
BEGIN { FS = "\t" }
FNR == 1 { file++ }
file == 1 { ninfo++; ikey[ninfo] = $1; ival[ninfo] = $2; info[$1] = $2; next }
file == 2 {
  s = $1
  if (!(s in unit)) { nser++; sname[nser] = s; unit[s] = $2 }
  if ($3 == "ok") { nv[s]++; val[s, nv[s]] = $4 + 0 } else { ne[s]++; err[s, ne[s]] = $4 }
  next
}
file == 3 { nrow++; for (i = 1; i <= 7; i++) R[nrow, i] = $i; next }

function stats(s,    i, j, n, t, a) {
  n = nv[s] + 0
  if (n == 0) return 0
  for (i = 1; i <= n; i++) a[i] = val[s, i]
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  MIN = a[1]; MAX = a[n]
  MED = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  return n
}
function fmt(x,    ax) {
  ax = x < 0 ? -x : x
  if (ax >= 1000) return sprintf("%.0f", x)
  if (ax >= 100) return sprintf("%.1f", x)
  if (ax >= 1) return sprintf("%.2f", x)
  if (ax == 0) return "0"
  return sprintf("%.3g", x)
}
function cell(s,    n, c) {
  if (s == "-" || s == "") return "-"
  if (s ~ /^const:/) return substr(s, 7)
  n = stats(s)
  if (n == 0) return (ne[s] + 0) ? "FAILED (" ne[s] "/" ne[s] ")" : "not run"
  c = (n == 1) ? fmt(MED) : fmt(MED) " [" fmt(MIN) ", " fmt(MAX) "]"
  if (ne[s] + 0) c = c " +" ne[s] " failed"
  return c
}
function med(s) {
  if (s ~ /^const:/) return substr(s, 7) + 0
  if (stats(s) == 0) return ""
  return MED
}
function jstr(x) {
  gsub(/\\/, "\\\\", x); gsub(/"/, "\\\"", x); gsub(/\t/, " ", x); gsub(/[\001-\037]/, " ", x)
  return "\"" x "\""
}
function jnum(x) { return (x == "") ? "null" : sprintf("%.6g", x) }
function jseries(s,    n, i, o) {
  if (s == "-" || s == "") return "null"
  if (s ~ /^const:/) return "{\"constant\": " jnum(substr(s, 7) + 0) "}"
  n = stats(s)
  o = "{\"series\": " jstr(s) ", \"n\": " n
  if (n > 0) o = o ", \"median\": " jnum(MED) ", \"min\": " jnum(MIN) ", \"max\": " jnum(MAX)
  o = o ", \"failed_runs\": " (ne[s] + 0) "}"
  return o
}
function target_text(k, v) {
  if (k == "ge") return ">= " v "x"
  if (k == "le") return "<= " v "x"
  if (k == "abs_le") return "<= " v
  if (k == "abs_ge") return ">= " v
  return ""
}
END {
  # evaluate rows
  for (r = 1; r <= nrow; r++) {
    sm = med(R[r, 3]); pm = (R[r, 5] == "-") ? "" : med(R[r, 5])
    ratio[r] = (sm != "" && pm != "" && pm > 0) ? sm / pm : ""
    k = R[r, 6]; v = R[r, 7] + 0
    if (k == "-") met[r] = ""
    else if (k == "ge") met[r] = (ratio[r] == "") ? "no" : (ratio[r] >= v ? "yes" : "no")
    else if (k == "le") met[r] = (ratio[r] == "") ? "no" : (ratio[r] <= v ? "yes" : "no")
    else if (k == "abs_le") met[r] = (sm == "") ? "no" : (sm <= v ? "yes" : "no")
    else if (k == "abs_ge") met[r] = (sm == "") ? "no" : (sm >= v ? "yes" : "no")
    smed[r] = sm
  }
  hdr = sprintf("softib benchmark %s  %s  (%s)", info["date_utc"], info["host"], info["options"])
  print hdr
  print "load average at start " info["loadavg_start"] ", at end " info["loadavg_end"] "; the machine is shared: absolute numbers are noisy, ratios are from the same run."
  fmtl = "%-46s %-6s %-28s %-26s %-28s %-7s %-8s %s\n"
  printf fmtl, "figure", "unit", "softib median [min, max]", "peer", "peer median [min, max]", "ratio", "target", "met"
  for (r = 1; r <= nrow; r++)
    printf fmtl, R[r, 1], R[r, 2], cell(R[r, 3]), R[r, 4], cell(R[r, 5]), (ratio[r] == "" ? "-" : sprintf("%.3g", ratio[r])), target_text(R[r, 6], R[r, 7]), met[r]
  # failures, each message once per series
  nf = 0
  for (i = 1; i <= nser; i++) {
    s = sname[i]
    if (ne[s] + 0 == 0) continue
    if (!nf++) print "\nfailed runs:"
    printf "  %s (%d of %d): %s\n", s, ne[s], ne[s] + nv[s], err[s, 1]
    for (j = 2; j <= ne[s]; j++) if (err[s, j] != err[s, 1]) printf "    also: %s\n", err[s, j]
  }

  if (md != "") {
    print "| figure | unit | softib median [min, max] | peer | peer median [min, max] | ratio | target | met |" > md
    print "|---|---|---|---|---|---|---|---|" > md
    for (r = 1; r <= nrow; r++)
      printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", R[r, 1], R[r, 2], cell(R[r, 3]), R[r, 4], cell(R[r, 5]), (ratio[r] == "" ? "-" : sprintf("%.3g", ratio[r])), target_text(R[r, 6], R[r, 7]), met[r] > md
    close(md)
  }

  if (json == "") exit
  printf "{\n  \"info\": {" > json
  for (i = 1; i <= ninfo; i++) printf "%s\n    %s: %s", (i > 1 ? "," : ""), jstr(ikey[i]), jstr(ival[i]) > json
  printf "\n  },\n  \"series\": {" > json
  for (i = 1; i <= nser; i++) {
    s = sname[i]; n = stats(s)
    printf "%s\n    %s: {\"unit\": %s, \"runs\": [", (i > 1 ? "," : ""), jstr(s), jstr(unit[s]) > json
    for (j = 1; j <= nv[s]; j++) printf "%s%s", (j > 1 ? ", " : ""), jnum(val[s, j]) > json
    printf "]" > json
    if (n > 0) printf ", \"median\": %s, \"min\": %s, \"max\": %s", jnum(MED), jnum(MIN), jnum(MAX) > json
    printf ", \"errors\": [" > json
    for (j = 1; j <= ne[s]; j++) printf "%s%s", (j > 1 ? ", " : ""), jstr(err[s, j]) > json
    printf "]}" > json
  }
  printf "\n  },\n  \"rows\": [" > json
  for (r = 1; r <= nrow; r++) {
    printf "%s\n    {\"figure\": %s, \"unit\": %s, \"softib\": %s, \"peer_label\": %s, \"peer\": %s, \"ratio\": %s, \"target\": %s, \"met\": %s}", \
      (r > 1 ? "," : ""), jstr(R[r, 1]), jstr(R[r, 2]), jseries(R[r, 3]), (R[r, 4] == "-" ? "null" : jstr(R[r, 4])), \
      jseries(R[r, 5]), jnum(ratio[r]), \
      (R[r, 6] == "-" ? "null" : "{\"kind\": " jstr(R[r, 6]) ", \"value\": " jnum(R[r, 7] + 0) ", \"text\": " jstr(target_text(R[r, 6], R[r, 7])) "}"), \
      (met[r] == "" ? "null" : (met[r] == "yes" ? "true" : "false")) > json
  }
  printf "\n  ]\n}\n" > json
  close(json)
}
