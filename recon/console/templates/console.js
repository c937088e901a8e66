// Progressive enhancement, no framework: beside every UTC time (<time datetime>), the same instant in the
// browser's own time zone. Without this script (or with scripts off) the pages stay complete in UTC.
document.querySelectorAll("time[datetime]").forEach(function (t) {
  var d = new Date(t.getAttribute("datetime"));
  if (isNaN(d.getTime())) { return; }
  var local = document.createElement("small");
  local.className = "local";
  local.textContent = " (" + d.toLocaleString(undefined, {dateStyle: "medium", timeStyle: "short"}) + " yours)";
  t.after(local);
});
