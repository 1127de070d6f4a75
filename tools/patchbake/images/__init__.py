"""Image definitions, base sources, the offline stand-in base, and image records."""
