"""Closed-form mathematics of each attention model: task specs, risks, gradients, reduced maps and flows.

One module per model (``single_location``, ``scan_snap``, ``icl_regression``, ``nearest_neighbor``,
``group_sparse``, ``random_walk``) plus ``special`` (Gaussian special functions). Import the model module you need,
e.g. ``from closedform import single_location``. Nothing here imports torch.
"""
