# Shared by benchmarks/study_publish.sh and benchmarks/study_worktree.sh (sourced, not run).

# The publish folder of benchmark config $1 (e.g. fashion-mnist/study-v3-long) as probcl's config loader reads it
# (empty when it has none), with the probcl this checkout imports.
publish_folder() {
    python3 -c "import sys; from probcl.tasks.benchmark.grid import load_benchmark
print(load_benchmark(sys.argv[1])[0].publish or '')" "$1"
}
