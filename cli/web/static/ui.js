// The slider and the seq box name a moment; moving either opens that moment (the URL carries it).
document.addEventListener("DOMContentLoaded", () => {
  const slider = document.getElementById("slider");
  const box = document.getElementById("seq");
  if (!slider) return;
  const go = (value) => {
    const url = new URL(window.location.href);
    url.searchParams.delete("at");
    url.searchParams.set("seq", value);
    window.location.assign(url.toString());
  };
  slider.addEventListener("input", () => { box.value = slider.value; });
  slider.addEventListener("change", () => go(slider.value));
  box.addEventListener("change", () => go(box.value));
  slider.form.addEventListener("submit", (e) => { e.preventDefault(); go(box.value); });
});
