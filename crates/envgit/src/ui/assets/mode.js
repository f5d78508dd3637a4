// Served by `envgit ui`; `envgit ui --export` writes `true` here.
window.ENVGIT_EXPORT = false;
