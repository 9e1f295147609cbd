# Shell functions the bench scripts share (sourced, from the repository's root).

# The median of the numbers on standard input (one per line, or separated by spaces).
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Seconds since $1, a `date +%s.%N` reading.
since() { echo "$(date +%s.%N) - $1" | bc; }

# "median WHO Ns" for each WHO given, from the caller's associative array `times` (WHO: its
# runs' seconds, separated by spaces).
medians() { local who; for who in "$@"; do echo "median $who $(echo "${times[$who]}" | median)s"; done; }
