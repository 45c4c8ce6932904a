# hack/e2e-failures.awk: `go test -v` output of the e2e tier in; out, for each top-level test that failed,
# the last `keep` lines it printed before its dump ("---- dump of namespace", test/e2e/release_test.go):
# the failure's own message, which parallel tests' lines and the dump otherwise push far from the end.
#
#   awk -v keep=15 -f hack/e2e-failures.awk go-test.log
/^=== RUN[ \t]/ && $3 !~ /\// { cnt[$3] = 0; delete dumped[$3] } # a top-level test starts (again, with -count)
/^=== (RUN|CONT|NAME|PAUSE)[ \t]/ { cur = $3; sub(/\/.*/, "", cur); next }
/^--- FAIL: / {
  n = $3; sub(/\/.*/, "", n)
  out = out "--- " n ":\n"
  for (i = (cnt[n] > keep ? cnt[n] - keep + 1 : 1); i <= cnt[n]; i++) out = out buf[n, i] "\n"
  cur = ""; next
}
/^--- (PASS|SKIP): / { cur = ""; next }
cur != "" && /---- dump of namespace/ { dumped[cur] = 1 }
cur != "" && !(cur in dumped) { buf[cur, ++cnt[cur]] = $0 }
END {
  if (out != "") printf "==== the failed tests' last lines before their dumps ====\n%s", out
}
