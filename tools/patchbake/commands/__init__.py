"""One module per stage; each defines ``register(group)`` adding its click commands."""
