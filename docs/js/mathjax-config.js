// MathJax 2.7, served from this site (copied from the jupyter-server-mathjax wheel by
// docs/hooks.py), typesets the math that pymdownx.arithmatex marks: \(...\) and \[...\]
// inside elements of class "arithmatex", and nothing else (code blocks keep their
// backslashes). The output is HTML with the STIX web fonts shipped beside it; nothing is
// fetched from the network. The jax themselves come in the combined config that
// mkdocs.yml loads with MathJax.js (TeX-AMS-MML_HTMLorMML-full: TeX input with AMS math,
// HTML-CSS output).
window.MathJax = {
  tex2jax: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    ignoreClass: ".*|",
    processClass: "arithmatex",
  },
  "HTML-CSS": {
    availableFonts: ["STIX-Web"], preferredFont: "STIX-Web", webFont: "STIX-Web", imageFont: null },
  showMathMenu: false,
  messageStyle: "none",
};
