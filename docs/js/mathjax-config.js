// MathJax 3, served from this site (copied from the django-static-mathjax wheel by
// docs/hooks.py: tex-chtml-full.js, TeX input with every extension and the CommonHTML
// output, and the fonts beside it), typesets the math that pymdownx.arithmatex marks:
// \(...\) and \[...\] inside elements of class "arithmatex", and nothing else (code blocks
// keep their backslashes). Nothing is fetched from the network.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
    enableMenu: false,
  },
};
