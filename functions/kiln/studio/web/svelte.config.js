import { vitePreprocess } from "@sveltejs/vite-plugin-svelte";

export default {
  preprocess: vitePreprocess(),
  compilerOptions: {
    // Scrolling output panes take focus on purpose, so keyboard users can scroll them
    // (axe's scrollable-region-focusable rule).
    warningFilter: (warning) => warning.code !== "a11y_no_noninteractive_tabindex",
  },
};
