"""attndyn's seventh model as a user adds one: registered through the ``attndyn.models`` entry point
(:data:`attndyn_linear_attention.model.MODEL`), torch side in ``torch_model``, one figure in ``figure``."""
