"""Registered torch ops (``torch.ops.sjlt.*``): launchers, dispatch and autograd."""
