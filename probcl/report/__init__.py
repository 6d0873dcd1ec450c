"""Reports: figures (matplotlib, Agg) and Markdown / self-contained HTML documents of evaluation results."""
