"""Plugin registration service (`pluginregistration.Registration`)."""
