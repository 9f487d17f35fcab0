from .run import main

# Guarded: worker processes are spawned, and spawning re-imports this module.
if __name__ == "__main__":
    raise SystemExit(main())
