"""Sphinx configuration of the course book: the committed, executed notebooks rendered
as HTML.

`make book` copies this folder and notebooks/*.ipynb into build/book-src and runs Sphinx
there; nothing is executed (the outputs are those committed) and nothing is fetched when
reading: MathJax is served from the book's own _static folder.
"""

project = "Attention and the Transformer, through English→French translation"
author = "the course authors"
copyright = "the course authors; Tatoeba sentences CC-BY 2.0 FR"

extensions = ["myst_nb", "sphinx.ext.mathjax"]
myst_enable_extensions = ["dollarmath", "amsmath"]
nb_execution_mode = "off"  # render the outputs committed with each notebook
nb_merge_streams = True
# Chapter 8's translator app is a live ipywidgets app; the book shows its static views
# instead and hides the app's output, so the widget manager myst-nb would load from a
# CDN is not wanted (nothing is fetched).
nb_ipywidgets_js = {}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = "Attention and the Transformer"
html_static_path = ["_static"]
# code at a size that fits 88 characters (book/course.css)
html_css_files = ["course.css"]
mathjax_path = "mathjax/tex-chtml.js"  # relative to _static: a local copy, no CDN
html_theme_options = {
    "show_navbar_depth": 1,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "repository_url": "",
}
html_last_updated_fmt = None
