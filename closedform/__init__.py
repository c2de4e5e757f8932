"""Closed-form mathematics of each attention model: task specs, risks, gradients, reduced maps and flows.

One module per model, plus ``special`` (Gaussian special functions) and ``models``, the model contract and the one
registry of models (:func:`closedform.models.names` lists them; other packages add theirs through the entry-point
group ``attndyn.models``). Import the model module you need, e.g. ``from closedform import single_location``.
Nothing here imports torch.
"""

__all__: list[str] = []  # the package re-exports nothing: its public surface is its modules, imported by name
