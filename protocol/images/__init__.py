"""Images: what each model family accepts (families.py), the generations request and its
validation (generation.py), the price of one image (pricing.py), PNG uploads (png.py). Pure:
no I/O."""
