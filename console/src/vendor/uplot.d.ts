// The page imports uPlot's ES module from beside it (copied there by `npm run build`: the browser
// resolves no bare package names); its types are the package's own.
import uPlot from 'uplot';
export default uPlot;
