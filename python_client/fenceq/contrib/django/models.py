"""No models: fenceq's tables live in its own schema, made by its own
migrations. Django sends post_migrate only to apps with a models module, and
the app creates its backends' queues then (schema.create_queues)."""
