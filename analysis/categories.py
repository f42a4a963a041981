"""The CLRS-30 algorithms: names, the paper's display names, row order and categories.

The one place that knows the 30 algorithms of CLRS-30 (Veličković et al., 2022) and how the
paper groups and spells them. Kept free of jax/clrs imports so analysis runs anywhere; the
names are those of `clrs.CLRS_30_ALGS` (== `nar_markov.config.clrs30.ALGORITHMS`).
"""

# clrs.CLRS_30_ALGS order (clrs/_src/specs.py), which is not alphabetical: articulation_points
# comes first.
ALGORITHMS = (
  "articulation_points",
  "activity_selector",
  "bellman_ford",
  "bfs",
  "binary_search",
  "bridges",
  "bubble_sort",
  "dag_shortest_paths",
  "dfs",
  "dijkstra",
  "find_maximum_subarray_kadane",
  "floyd_warshall",
  "graham_scan",
  "heapsort",
  "insertion_sort",
  "jarvis_march",
  "kmp_matcher",
  "lcs_length",
  "matrix_chain_order",
  "minimum",
  "mst_kruskal",
  "mst_prim",
  "naive_string_matcher",
  "optimal_bst",
  "quickselect",
  "quicksort",
  "segments_intersect",
  "strongly_connected_components",
  "task_scheduling",
  "topological_sort",
)

# Row labels exactly as the paper's tables print them (LaTeX source).
DISPLAY_NAMES = {
  "activity_selector": "Activity Selector",
  "articulation_points": "Articulation Points",
  "bellman_ford": "Bellman-Ford",
  "bfs": "BFS",
  "binary_search": "Binary Search",
  "bridges": "Bridges",
  "bubble_sort": "Bubble Sort",
  "dag_shortest_paths": "DAG Shortest Paths",
  "dfs": "DFS",
  "dijkstra": "Dijkstra",
  "find_maximum_subarray_kadane": "Find Max. Subarray",
  "floyd_warshall": "Floyd-Warshall",
  "graham_scan": "Graham Scan",
  "heapsort": "Heapsort",
  "insertion_sort": "Insertion Sort",
  "jarvis_march": "Jarvis' March",
  "kmp_matcher": "Knuth-Morris-Pratt",
  "lcs_length": "LCS Length",
  "matrix_chain_order": "Matrix Chain Order",
  "minimum": "Minimum",
  "mst_kruskal": "MST-Kruskal",
  "mst_prim": "MST-Prim",
  "naive_string_matcher": 'Na\\"ive String Matcher',
  "optimal_bst": "Optimal BST",
  "quickselect": "Quickselect",
  "quicksort": "Quicksort",
  "segments_intersect": "Segments Intersect",
  "strongly_connected_components": "SCC",
  "task_scheduling": "Task Scheduling",
  "topological_sort": "Topological Sort",
}

# The paper's tables list the algorithms alphabetically (by CLRS name, which gives the same
# order as the display names); the two-column tables put the first 15 on the left and the
# last 15 on the right.
PAPER_ORDER = tuple(sorted(ALGORITHMS))

# CLRS-30 grouping (Veličković et al., 2022, Sec. 3). Checked against the paper's Table 2:
# the category rows there equal the mean of these algorithms in its Table 6 (a test does it).
CATEGORY_ALGORITHMS = {
  "divide_and_conquer": ("find_maximum_subarray_kadane",),
  "dynamic_programming": ("matrix_chain_order", "lcs_length", "optimal_bst"),
  "geometry": ("segments_intersect", "graham_scan", "jarvis_march"),
  "graphs": (
    "dfs",
    "bfs",
    "topological_sort",
    "articulation_points",
    "bridges",
    "strongly_connected_components",
    "mst_kruskal",
    "mst_prim",
    "bellman_ford",
    "dijkstra",
    "dag_shortest_paths",
    "floyd_warshall",
  ),
  "greedy": ("activity_selector", "task_scheduling"),
  "search": ("minimum", "binary_search", "quickselect"),
  "sorting": ("insertion_sort", "bubble_sort", "heapsort", "quicksort"),
  "strings": ("naive_string_matcher", "kmp_matcher"),
}

# Row labels of the paper's Table 2, in its order.
CATEGORY_DISPLAY_NAMES = {
  "divide_and_conquer": "Div. \\& C.",
  "dynamic_programming": "DP",
  "geometry": "Geometry",
  "graphs": "Graphs",
  "greedy": "Greedy",
  "search": "Search",
  "sorting": "Sorting",
  "strings": "Strings",
}

CATEGORY = {alg: cat for cat, algs in CATEGORY_ALGORITHMS.items() for alg in algs}

assert sorted(PAPER_ORDER) == sorted(CATEGORY) == sorted(ALGORITHMS), "one category each"
assert len(set(DISPLAY_NAMES)) == len(ALGORITHMS) == 30


def display_name(algorithm):
  """Paper spelling of a CLRS algorithm name (the name, LaTeX-escaped, if unknown)."""
  return DISPLAY_NAMES.get(algorithm, algorithm.replace("_", "\\_"))


def plain_name(algorithm):
  """Display name without LaTeX markup (for Markdown and plots)."""
  return display_name(algorithm).replace('\\"i', "ï").replace("\\&", "&").replace("\\_", "_")
