"""How the served model is doing: drift against its reference, the class mix, live precision."""
