"""dsh-jupyter: a Code-Mode tool registry for Jupyter."""
