"""``python -m rknn.bin.visualization``: Toolkit 1.3's way to start the graphical tool; opens openrknn's workbench."""
import sys

from openrknn.ui import main

if __name__ == "__main__":
    sys.exit(main())
