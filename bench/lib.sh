# Shell functions the bench scripts share (sourced, from the repository's root).

# The median of the numbers on standard input (one per line, or separated by spaces).
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
